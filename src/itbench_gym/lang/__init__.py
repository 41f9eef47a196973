"""The small languages that several systems the twin copies share, written once.

Durations, timestamps, Go string literals, Go (RE2) regular expressions, Go text/template,
Kubernetes label selectors and flagd flag files each appear in more than one API (Prometheus,
Loki, Jaeger, Chaos Mesh, Kubernetes, flagd) or grader, and in the agent tools that talk to them. They live here, outside the twin, so the tools and the twin
parse and print them the same way without the tools importing twin internals. Each module names
the upstream function it copies.
"""
