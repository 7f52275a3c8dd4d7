"""Every method's main job on every sample with its demo parameters, saved for comparison.

Run it on two commits and compare (issue 15: "byte-identical results on the samples before
and after"); each image layer of each result is one array of the ``.npz``::

    git worktree add /tmp/before <commit>
    (cd /tmp/before && PYTHONPATH=src python /path/to/scripts/sample_results.py /tmp/before.npz)
    PYTHONPATH=src python scripts/sample_results.py /tmp/after.npz
    python scripts/sample_results.py --compare /tmp/before.npz /tmp/after.npz

Runs on the CPU (``device="cpu"``, a reference run); about a minute on two cores.
"""

from __future__ import annotations

import sys

import numpy as np


def run(path: str) -> None:
    from napari_gpuscope import methods
    from napari_gpuscope.compute.jobs import run_job

    arrays = {}
    for spec in methods.METHODS.values():
        for sample in spec.samples:
            for data, kwargs, _ in sample.load():
                params = spec.params_for_sample(kwargs)
                result = run_job(spec.job_function()(data, params=params, device="cpu"))
                for index, (array, layer, kind) in enumerate(result.layers(sample.key)):
                    if kind == "image":
                        arrays[f"{sample.key}:{index}:{layer['name']}"] = np.asarray(array)
                print(f"{sample.key}: done", flush=True)
    np.savez(path, **arrays)


def compare(before: str, after: str) -> int:
    a, b = np.load(before), np.load(after)
    differing = sorted(set(a.files) ^ set(b.files))
    for key in sorted(set(a.files) & set(b.files)):
        x, y = a[key], b[key]
        same = x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes()
        print(f"{'same' if same else 'DIFFERENT'}: {key} {x.shape} {x.dtype}")
        differing += [] if same else [key]
    print(f"{len(differing)} of {len(set(a.files) | set(b.files))} differ")
    return 1 if differing else 0


if __name__ == "__main__":
    if sys.argv[1] == "--compare":
        sys.exit(compare(sys.argv[2], sys.argv[3]))
    run(sys.argv[1])
