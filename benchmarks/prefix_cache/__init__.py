"""The prefix-cache benchmark suite (S2): real conversations through the Harness against the Ray-hosted vLLM."""
