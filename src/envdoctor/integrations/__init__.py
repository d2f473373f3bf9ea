"""Framework integrations: preflight where training starts.

Lightning and Hugging Face build the train DataLoader inside their trainer,
so a training script never holds the loader `envdoctor.preflight(loader=...)`
needs. The callbacks in `envdoctor.integrations.lightning` and
`envdoctor.integrations.transformers` take it from the trainer before the
first step, profile it once per node, and fail or warn per `fail_on`.

Nothing here imports a framework: each module imports its own framework,
and only when it is imported itself.
"""
