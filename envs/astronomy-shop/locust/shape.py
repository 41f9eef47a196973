"""A Locust LoadTestShape that runs the schedule in shape.json next to this file.

Mounted into the load generator with shape.json (a ConfigMap) and added to its locustfiles
(LOCUST_LOCUSTFILE, comma-separated), so that the image's own locustfile keeps its user classes
while this class sets how many of them run: {"kind": "steps", "steps": [{"at", "users",
"spawn_rate"?}, ...]} or {"kind": "daily", "min_users", "max_users", "peak_at"?, "period"?,
"spawn_rate"?}. A stage without spawn_rate ramps at Locust's -r (LOCUST_SPAWN_RATE). The
itbench_gym twin computes the same values (itbench_gym/spec/loadshape.py).
"""

import json
import math
from pathlib import Path

from locust import LoadTestShape

STAGES = json.loads(Path(__file__).with_name("shape.json").read_text())


class ScenarioLoadShape(LoadTestShape):
    """The scenario's users by run time; the schedule never ends (the generator runs for good)."""

    def tick(self):
        run_time = self.get_run_time()
        if STAGES["kind"] == "steps":
            step = [s for s in STAGES["steps"] if s["at"] <= run_time][-1]
            users, rate = step["users"], step.get("spawn_rate")
        else:
            period = STAGES.get("period", 86400.0)
            phase = 2.0 * math.pi * (run_time - STAGES.get("peak_at", 0.0)) / period
            low, high = STAGES["min_users"], STAGES["max_users"]
            users, rate = round(low + (high - low) * (1.0 + math.cos(phase)) / 2.0), STAGES.get("spawn_rate")
        if rate is None:
            rate = self.runner.environment.parsed_options.spawn_rate
        return users, rate
