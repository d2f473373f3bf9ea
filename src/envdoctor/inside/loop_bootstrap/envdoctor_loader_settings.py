"""A live DataLoader's settings, read back so the smoke test can build the same loader again.

Two sides need this and must agree: `envdoctor.loader.describe_loader`
(`preflight(loader=...)`, in envdoctor's own process) and the loop observer
(`envdoctor run --tune`, in the user's training process, which has no
envdoctor). It lives here, beside the observer, stdlib-only and with no
envdoctor imports, so the observer imports it by its top-level name from the
bootstrap folder on PYTHONPATH and envdoctor imports it by its package path.
"""


def loader_settings(loader):
    """(kwargs, description): the DataLoader keyword arguments that rebuild `loader` around its dataset,
    and a one-line description of it."""
    kwargs = {"collate_fn": loader.collate_fn, "num_workers": loader.num_workers, "pin_memory": loader.pin_memory,
              "timeout": loader.timeout, "worker_init_fn": loader.worker_init_fn,
              "persistent_workers": loader.persistent_workers, "generator": getattr(loader, "generator", None)}
    if loader.num_workers:
        kwargs["prefetch_factor"] = loader.prefetch_factor
    if loader.multiprocessing_context is not None:
        kwargs["multiprocessing_context"] = loader.multiprocessing_context
    if loader.batch_size is not None:
        # The default BatchSampler around the loader's sampler (random or sequential).
        kwargs.update(batch_size=loader.batch_size, sampler=loader.sampler, drop_last=loader.drop_last)
    elif loader.batch_sampler is not None:
        kwargs["batch_sampler"] = loader.batch_sampler
    else:
        kwargs.update(batch_size=None, sampler=loader.sampler)
    size = loader.batch_size if loader.batch_size is not None else getattr(loader.batch_sampler, "batch_size", None)
    description = "DataLoader(%s, batch_size=%s, num_workers=%s)" % (
        type(loader.dataset).__name__, size, loader.num_workers)
    return kwargs, description
