"""Policy engines (Kyverno, Gatekeeper/Rego) and their conformance reporting."""
