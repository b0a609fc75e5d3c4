"""errands' shared vocabulary: states, records, settings, checks, payload rule, backoff,
histogram bounds, schedule maths. No I/O; every other layer may use it, including backends/."""
