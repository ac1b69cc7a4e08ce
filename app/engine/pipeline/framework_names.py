"""The framework names rules, detectors and patches speak of.

Kept free of imports: `logtriage --help` lists them without loading the rule library (its
schema alone costs pydantic's import). `app.engine.pipeline.library.Framework` is the same list as a
type; a test keeps the two equal.
"""

FRAMEWORK_NAMES: tuple[str, ...] = (
    "roll",
    "chatlearn",
    "slime",
    "verl",
    "openrlhf",
    "megatron",
    "deepspeed",
    "vllm",
    "sglang",
    "ray",
    "pytorch",
)
