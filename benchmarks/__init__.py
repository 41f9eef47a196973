"""The performance harness of itbench_gym (issue 12): ``python -m benchmarks`` or ``itbench-gym bench``.

Each figure is a module with ``KEY``, ``TITLE`` and ``run(options) -> Section``: resets, steps,
episodes, memory, scaling (synthetic apps from ``benchmarks.synthetic``), vector, imports.
``benchmarks.report`` writes the JSON and Markdown. Speed is measured here, never asserted in tests.
"""
