"""logtriage: root-cause triage for failed RL/LLM training jobs."""

__version__ = "0.1.0"
