"""CEL as Kubernetes evaluates it in admission policies (Kyverno's ``validate.cel``): ``engine.compile_cel``.

Imported on first use (cel-python costs ~130 ms to import), not by ``itbench_gym.policy``.
"""
