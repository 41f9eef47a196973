"""Proving scenarios on the twin (``itbench-gym validate``) and the catalogue page made from the proof.

``checks`` proves one scenario per seed; ``run`` selects scenarios and runs them in worker processes;
``triggering`` decides the triggering alerts of library scenarios whose index lists none; ``catalogue``
renders ``docs/scenarios.md``.
"""
