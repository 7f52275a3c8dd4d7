"""The parameter models: strict validation with clear messages, lossless JSON/YAML round trip,
and public functions whose keywords come from the model."""

from __future__ import annotations

import importlib.util
import inspect
import json
import math

import numpy as np
import pytest
from pydantic.fields import FieldInfo

from napari_gpuscope.compute import tv
from napari_gpuscope.compute.params import ParameterError, ParamInfo, Params, param
from napari_gpuscope.compute.signatures import takes_params


class Demo(Params):
    sigma: float = param(
        1.0, minimum=0.0, exclusive_minimum=True, maximum=10.0, unit="px", help="Width"
    )
    count: int = param(3, minimum=1, help="How many")
    mode: str = param("a", choices={"a": "Mode A", "b": "Mode B"}, help="Which mode")
    flag: bool = param(False, help="A switch")
    weights: tuple[float, ...] | None = param(None, minimum=0.0, help="Per-axis weights")
    gain: float | None = param(None, minimum=0.0, help="Optional gain")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"sigma": 0.0}, r"Demo.sigma must be a finite number > 0 and <= 10, got 0.0"),
        ({"sigma": "1"}, r"Demo.sigma must be a finite number .*got '1'"),
        ({"sigma": math.nan}, r"Demo.sigma .*got nan"),
        ({"sigma": True}, r"Demo.sigma .*got True"),
        ({"count": 2.5}, r"Demo.count must be an integer >= 1, got 2.5"),
        ({"count": 0}, r"Demo.count must be an integer >= 1, got 0"),
        ({"mode": "c"}, r"Demo.mode must be one of 'a', 'b', got 'c'"),
        ({"flag": "no"}, r"Demo.flag must be True or False, got 'no'"),
        ({"flag": 1}, r"Demo.flag must be True or False, got 1"),
        ({"weights": "11"}, r"Demo.weights must be a sequence of numbers >= 0, got '11'"),
        ({"weights": {"z": 1}}, r"Demo.weights must be a sequence of numbers"),
        ({"weights": (1.0, -1.0)}, r"Demo.weights\[1\] must be a finite number >= 0"),
        ({"weights": (1.0, "x")}, r"Demo.weights\[1\] must be a number"),
        ({"gain": "2"}, r"Demo.gain must be a finite number >= 0, got '2'"),
    ],
)
def test_bad_values_name_the_parameter_the_value_and_the_range(kwargs, message):
    with pytest.raises(ParameterError, match=message):
        Demo(**kwargs)


def test_values_are_normalised_and_frozen():
    p = Demo(sigma=np.float32(2), count=np.int64(4), weights=np.array([1, 2]), flag=np.bool_(True))
    assert (p.sigma, p.count, p.weights, p.flag) == (2.0, 4, (1.0, 2.0), True)
    assert type(p.sigma) is float and type(p.count) is int and type(p.flag) is bool
    # pydantic's own refusal (a ValueError): it names the model and the field and says why.
    with pytest.raises(ValueError, match=r"for Demo\nsigma\n  Instance is frozen"):
        p.sigma = 3.0  # type: ignore[misc]
    with pytest.raises(ValueError, match=r"for Demo\ncount\n  Instance is frozen"):
        del p.count
    assert (p.sigma, p.count) == (2.0, 4)


def test_json_and_yaml_round_trips_are_lossless():
    yaml = pytest.importorskip("yaml")  # absent on the GPU kit's bare machine
    p = Demo(sigma=0.1 + 0.2, count=7, mode="b", flag=True, weights=(1 / 3, 0.0), gain=None)
    assert Demo.from_json(p.to_json()) == p
    assert Demo.from_yaml(p.to_yaml()) == p
    assert json.loads(p.to_json())["weights"] == [1 / 3, 0.0]
    assert yaml.safe_load(p.to_yaml())["sigma"] == 0.1 + 0.2


def test_unknown_keys_are_an_error_not_ignored():
    with pytest.raises(ParameterError, match=r"no parameter\(s\) \['sigmaa'\]; valid names"):
        Demo.from_dict({"sigmaa": 1.0})
    with pytest.raises(ParameterError, match="no parameter"):
        Demo().replace(colour="red")


def test_param_info_describes_every_field():
    info = {i.name: i for i in Demo.param_info()}
    assert info["sigma"].unit == "px" and info["sigma"].range_text() == "> 0 and <= 10"
    assert info["mode"].choices == {"a": "Mode A", "b": "Mode B"}
    assert info["weights"].kind == "floats" and info["weights"].optional
    assert info["count"].label == "Count" and info["count"].help == "How many"


def test_takes_params_builds_the_signature_from_the_model():
    @takes_params(Demo, positional=("sigma",))
    def run(data, params, *, device=None):
        """Run.

        Parameters
        ----------
        data : object
        {params}
        """
        return data, params, device

    signature = inspect.signature(run)
    assert list(signature.parameters)[:3] == ["data", "sigma", "params"]
    assert signature.parameters["count"].default == 3
    assert "count : int, optional" in run.__doc__
    assert run(1, 2.0)[1] == Demo(sigma=2.0)
    assert run(1, Demo(count=5), count=6)[1] == Demo(count=6)  # keywords override the object
    assert run(1, params=Demo(mode="b"), device="cpu")[1:] == (Demo(mode="b"), "cpu")
    with pytest.raises(TypeError, match="unexpected keyword"):
        run(1, colour="red")
    with pytest.raises(TypeError, match="multiple values"):
        run(1, 2.0, sigma=3.0)
    with pytest.raises(ParameterError, match=r"Demo\.count"):
        run(1, count=-1)


# --- TVParams --------------------------------------------------------------------------------


def test_tv_params_round_trip_and_defaults():
    p = tv.TVParams(strength=1.25, spacing=(0.25, 1.0, 1.0), noise_model="poisson", gain=2.0)
    assert tv.TVParams.from_json(p.to_json()) == p
    if importlib.util.find_spec("yaml") is not None:  # absent on the GPU kit's bare machine
        assert tv.TVParams.from_yaml(p.to_yaml()) == p
    assert tv.TVParams().weight is None and tv.TVParams().label == "s=1"
    assert tv.TVParams(weight=0.05).label == "w=0.05"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"spacing": (1e-200, 1.0)}, r"spacing\[0\] must be 0 \(not coupled\) or within"),
        ({"spacing": (1e-20, 1.0)}, r"spacing\[0\] must be 0 \(not coupled\) or within"),
        ({"spacing": (1e200, 1.0)}, r"spacing\[0\] must be a finite number in \[0, 10000\]"),
        ({"spacing": (0.0, 0.0)}, "no coupled axis"),
        ({"spacing": "11"}, "must be a sequence of numbers"),
        ({"gain": "2"}, r"TVParams.gain must be a finite number > 0"),
        ({"nonnegative": "no"}, r"TVParams.nonnegative must be True or False, got 'no'"),
        ({"offset": 100.0}, r"TVParams.gain is None .*offset and read_noise must be None"),
        ({"method": "bregman"}, r"TVParams.method must be one of 'fgp', 'chambolle'"),
        ({"weight": -1.0}, r"TVParams.weight must be a finite number in \[0, 3.40282e\+38\]"),
    ],
)
def test_tv_params_refuse_what_would_fail_later(kwargs, message):
    with pytest.raises(ParameterError, match=message):
        tv.TVParams(**kwargs)


def test_tv_accepts_a_params_object_or_keywords_alike():
    image = np.random.default_rng(0).normal(0.5, 0.1, (32, 32)).astype(np.float32)
    p = tv.TVParams(weight=0.1, max_iterations=30, tolerance=0)
    by_object = tv.denoise(image, p, device="cpu")
    by_keyword = tv.denoise(image, params=p, device="cpu")
    by_keywords = tv.denoise(image, 0.1, max_iterations=30, tolerance=0, device="cpu")
    np.testing.assert_array_equal(by_object, by_keyword)
    np.testing.assert_array_equal(by_object, by_keywords)


# --- the pydantic model ----------------------------------------------------------------------


def test_the_metadata_is_in_the_pydantic_fields_and_the_json_schema():
    schema = Demo.model_json_schema()
    assert schema["additionalProperties"] is False
    sigma = schema["properties"]["sigma"]
    assert (sigma["exclusiveMinimum"], sigma["maximum"], sigma["unit"]) == (0.0, 10.0, "px")
    assert (sigma["title"], sigma["description"], sigma["advanced"]) == ("Sigma", "Width", False)
    assert schema["properties"]["mode"]["enum"] == ["a", "b"]
    assert schema["properties"]["mode"]["choice_labels"] == {"a": "Mode A", "b": "Mode B"}
    weights = schema["properties"]["weights"]["anyOf"][0]
    assert weights["type"] == "array" and weights["items"]["minimum"] == 0.0
    assert Demo.model_config["strict"] and Demo.model_config["frozen"]


def test_pydantic_entry_points_give_parameter_errors_and_the_same_values():
    assert Demo.model_validate({"count": np.int64(2)}) == Demo(count=2)
    assert Demo.model_validate_json('{"weights": [1, 2]}').weights == (1.0, 2.0)
    with pytest.raises(ValueError, match=r"Demo.sigma must be a finite number > 0"):
        Demo.model_validate({"sigma": 0})
    with pytest.raises(TypeError, match="unexpected keyword argument 'colour'"):
        Demo(colour="red")
    for build in (
        lambda: Demo(count=-1),
        lambda: Demo.from_dict({"count": -1}),
        lambda: Demo().replace(count=-1),
    ):
        with pytest.raises(ParameterError, match=r"^Demo.count must be an integer >= 1, got -1$"):
            build()


def test_rules_between_fields_raise_the_parameter_error_itself():
    with pytest.raises(ParameterError) as error:
        tv.TVParams(offset=100.0)
    assert type(error.value) is ParameterError
    assert str(error.value).startswith("TVParams.gain is None")


def test_replace_validates_and_normalises_like_the_constructor():
    p = tv.TVParams().replace(strength=np.float32(2))
    assert p == tv.TVParams(strength=2.0) and type(p.strength) is float
    with pytest.raises(ParameterError, match=r"TVParams\.tolerance"):
        p.replace(tolerance=-1)
    with pytest.raises(ParameterError, match="no parameter"):
        p.replace(strenght=1.0)


def test_a_field_without_param_is_refused():
    with pytest.raises(TypeError, match=r"Bad.x must be declared with param\(\)"):

        class Bad(Params):
            x: float = 1.0


def test_a_rule_that_raises_a_plain_value_error_still_names_the_model():
    class Window(Params):
        low: float = param(0.0, help="Lower end")
        high: float = param(1.0, help="Upper end")

        def validate(self):
            if self.high <= self.low:
                raise ValueError("high must exceed low")

    with pytest.raises(ParameterError, match=r"^Window: high must exceed low$"):
        Window(low=2.0)


def test_param_is_a_pydantic_field_and_param_info_reads_it():
    field = Demo.model_fields["sigma"]
    assert isinstance(field, FieldInfo)
    assert (field.default, field.title, field.description) == (1.0, "Sigma", "Width")
    assert field.json_schema_extra == {"advanced": False, "unit": "px"}
    # Every argument of the declaration at the top of this file, and nothing else.
    assert Demo.info("sigma") == ParamInfo(
        "sigma", "float", False, 1.0, "Width", "Sigma", "px", 0.0, 10.0, True, None, False
    )
    assert Demo.info("weights") == ParamInfo(
        "weights", "floats", True, None, "Per-axis weights", "Weights", "", 0.0
    )
    # A view: changing the copy it returns changes nothing in the model.
    Demo.info("mode").choices["c"] = "Mode C"  # type: ignore[index]
    assert Demo.info("mode").choices == {"a": "Mode A", "b": "Mode B"}
    with pytest.raises(KeyError, match="Demo has no parameter 'colour'"):
        Demo.info("colour")


def test_an_unsupported_field_type_is_refused():
    with pytest.raises(TypeError, match="unsupported parameter type"):

        class Bad(Params):
            x: list[int] = param([1], help="A list")


class _Counting(Params):
    """A model whose later field's default changed: records without it meant 50."""

    frames: int | None = param(
        None, minimum=1, help="Frames (None: automatic)", added_later=True, older_default=50
    )
    gain: float = param(1.0, help="Gain")


def test_a_field_whose_default_changed_keeps_what_older_records_meant():
    assert _Counting().frames is None  # today's default
    assert _Counting.from_dict({"gain": 2.0}).frames == 50  # a record without the field
    assert _Counting.from_json('{"gain": 2.0}').frames == 50
    assert _Counting(frames=50).to_dict() == {"gain": 1.0}  # written as older records were
    assert _Counting().to_dict() == {"frames": None, "gain": 1.0}  # the new default is written
    for model in (_Counting(), _Counting(frames=50), _Counting(frames=7)):
        assert _Counting.from_dict(model.to_dict()) == model
    assert _Counting.info("frames").absent_value == 50
    assert _Counting.info("gain").absent_value == 1.0


def test_older_default_is_for_a_field_added_later():
    with pytest.raises(TypeError, match="added_later"):
        param(None, help="x", older_default=50)


def test_the_same_as_default_marker_survives_copies_and_pickles():
    """Fields are compared with the marker by identity: a pickled or copied field must keep
    meaning "no older default", not hold a lookalike object."""
    import copy
    import pickle

    from napari_gpuscope.compute._param_fields import SAME_AS_DEFAULT
    from napari_gpuscope.compute.esrrf import EsrrfParams

    checks = EsrrfParams.model_fields["max_drift"].metadata[-1]
    for clone in (pickle.loads(pickle.dumps(checks)), copy.deepcopy(checks), copy.copy(checks)):
        assert clone.older_default is SAME_AS_DEFAULT
    field = copy.deepcopy(EsrrfParams.model_fields["drift_time_averaging"])
    assert field.metadata[-1].older_default == 50
