"""A method that exists only in the tests, laid out as a package the way a real one is.

It follows ``docs/architecture.md``'s "Adding a method" with new files only: a compute package
(:mod:`.compute`: the parameter model, the job and its result, exported lazily), samples and
demo parameters (:mod:`.samples`), a thin dock (:mod:`.dock`) and its registry entry
(:mod:`.entry`). The entry is the one edit: ``tests/conftest.py`` registers it before the tests
are collected when ``NAPARI_GPUSCOPE_TEST_METHOD_PACKAGE=1``, which only
``tests/test_adding_a_method.py`` sets, in a pytest run of its own; a user's run never sees it.
"""

ENV = "NAPARI_GPUSCOPE_TEST_METHOD_PACKAGE"
"""``1``: ``tests/conftest.py`` registers this package's method before collection."""
