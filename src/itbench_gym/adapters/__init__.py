"""Adapters to the field's harnesses: MCP clients, ITBench's agent hand-off, RL trainers' rollouts."""
