"""The prefix-cache benchmark suite: one scripted trajectory per workflow, replayed through the Harness in every arm
against the Ray-hosted vLLM."""
