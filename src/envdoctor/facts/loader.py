"""The types of the `loader` facts section: what the smoke test observed, nothing it concluded.

The runner (inside/loader_runner.py) writes these shapes as JSON events;
`envdoctor.loader.assemble` files them into a `LoaderFacts`. What is decided
of them — the bottleneck class, the knee, the recommendation and how far the
machine's noise lets us trust it — is `LoaderJudgement`, computed once from
these facts by the judge layer (`envdoctor.judge.loader`) and added to the
report's `loader` object as `LoaderReport`.
"""
from __future__ import annotations

from typing import Literal, TypedDict, final

from envdoctor.inside.loader_growth import WorkerGrowth


class _RunBase(TypedDict):
    num_workers: int
    samples_per_s: float | None
    first_batch_s: float | None


class RunFacts(_RunBase, total=False):
    """One timed run of the DataLoader at one num_workers."""

    samples_per_s_min: float
    samples_per_s_max: float
    spread: float
    steady_batches: int
    steady_s: float
    windows: int
    batches: int
    epochs: int
    seconds: float
    #: Share of the wall time the main process computed.
    main_cpu: float
    #: Per worker, shares of the wall time: computing, queued for a CPU, blocked (waiting).
    worker_cpu: float
    worker_runqueue: float
    worker_blocked: float
    #: Per worker, share of the wall time its process (every thread) computed.
    worker_process_cpu: float
    worker_rss_bytes: int
    #: CPU-seconds a second the main process's threads (torch's intra-op pool too) queued for a CPU.
    main_runqueue: float
    #: CPUs other processes kept busy, on average, on the CPUs the loader may run on (/proc/stat over the
    #: CPUs of its affinity, less the loader's own processes), and how many CPUs that counted.
    others_cpu: float
    stat_cpus: int
    #: num_workers=0 rated by its first batch alone (one that took twice the slice: nothing starts without
    #: workers, so it is a steady batch).
    from_first_batch: bool
    #: Only on the judgement's own copy of the user's setting, re-rated by the paired windows: its sweep figure.
    sweep_samples_per_s: float
    pin_memory: bool
    persistent_workers: bool
    epoch_s: list[float]
    epoch_first_batch_s: list[float | None]


class GetitemFacts(TypedDict, total=False):
    """`__getitem__` timed in the main process (num_workers=0)."""

    samples: int
    per_sample_s: float
    median_s: float
    max_s: float
    cpu_fraction: float | None
    blocked_fraction: float | None
    read_s: float
    decode_s: float
    #: CPU seconds of the whole main process (every thread) and wall seconds, per sample fetched.
    process_cpu_per_sample_s: float
    wall_per_sample_s: float
    #: torch.get_num_threads() in the main process, where num_workers=0 makes the samples.
    intra_op_threads: int
    #: The same samples re-fetched alternately with those threads and with torch.set_num_threads(1).
    threads_median_s: float
    one_thread_median_s: float
    retimed_samples: int
    #: Samples were slow and one thread made them faster: the rest of the first batch was fetched (untimed)
    #: with one thread, so the contention did not spend the budget the worker counts needed.
    rest_one_thread: bool


class CurrentSettings(TypedDict, total=False):
    """The user's own DataLoader settings (defaults for a bare Dataset)."""

    num_workers: int
    prefetch_factor: int | None
    persistent_workers: bool
    pin_memory: bool
    batch_size: int
    assumed_batch_size: bool


class FailureFacts(TypedDict, total=False):
    """The dataset raised, hung, crashed or could not be built."""

    kind: str
    message: str
    index: int | str | None
    num_workers: int | None
    where: str | None
    exception: str | None
    signal: str | None
    trace: str | None
    in_progress: dict[str, int]
    log_tail: list[str]


class SkipFacts(TypedDict):
    what: str
    reason: str


class PersistentFacts(TypedDict, total=False):
    num_workers: int
    measured: bool
    samples_per_epoch: int
    epoch2_first_batch_s: dict[str, float | None]
    epoch_s: dict[str, list[float] | None]
    saving_s: float | None


class PinFacts(TypedDict, total=False):
    num_workers: int
    unpinned_samples_per_s: float | None
    pinned_samples_per_s: float | None
    pinned_first_batch_s: float | None


class PickleProblem(TypedDict, total=False):
    object: str
    type: str
    error: str


class PickleFacts(TypedDict, total=False):
    start_method: str | None
    checked: bool
    problems: list[PickleProblem]


@final  # no subclass adds keys: `"…" in window` tells it from envdoctor run's LoopProofWindow
class PairedWindow(TypedDict):
    """One pair of back-to-back windows: the current setting and the candidate, in `order`."""

    order: Literal["current-first", "candidate-first"]
    current_samples_per_s: float
    candidate_samples_per_s: float


class PairedFacts(TypedDict, total=False):
    """The candidate setting re-measured against the current one in interleaved, paired windows."""

    current: int
    candidate: int
    window_s: float
    windows: list[PairedWindow]
    #: Why fewer pairs than planned were measured (the budget), if so.
    cut: str | None


class DuplicatesFacts(TypedDict, total=False):
    """DL007: sample identities (hashes of each sample's tensors) over one bounded epoch."""

    num_workers: int
    samples_0: int
    duplicates_0: int
    samples_n: int
    duplicates_n: int
    #: The most times one sample identity was seen with workers.
    most_repeats_n: int
    bounded: bool


class RngFacts(TypedDict, total=False):
    """DL008: one index drawn twice in the main process, then first by each of two workers."""

    index: int | str
    main_differs: bool
    workers_identical: bool | None
    num_workers: int
    worker_init_fn: str | None


class HandleFacts(TypedDict):
    """DL011: an open native handle reachable from the dataset, sampler, collate_fn or worker_init_fn."""

    #: The attribute path from the root, e.g. `dataset.db` or `dataset.files[0]`.
    path: str
    #: What it is: `h5py.File`, `lmdb.Environment`, `sqlite3.Connection`, `zipfile.ZipFile`, `file`, …
    kind: str
    file: str | None


class ContainerFacts(TypedDict):
    """A large container of Python objects the dataset holds (DL010's evidence)."""

    path: str
    type: str
    length: int
    #: Approximate bytes of the container and its elements (one level down), from a sample of elements.
    approx_bytes: int
    objects: int


class HazardsFacts(TypedDict, total=False):
    """The bounded walk of the loader's objects before any worker starts (inside/loader_hazards.py)."""

    handles: list[HandleFacts]
    containers: list[ContainerFacts]
    #: Approximate bytes of the outermost containers reported: what a forked worker can come to copy.
    python_bytes: int
    objects_visited: int
    #: The walk stopped at its bound on objects visited.
    cut: bool
    start_method: str | None


class MemoryGrowthFacts(TypedDict, total=False):
    """DL010: workers' private memory against the samples each produced (inside/loader_memory.py)."""

    num_workers: int
    seconds: float
    #: The whole epoch ran within the measurement.
    epoch_done: bool
    #: The sampler draws indices at random (shuffle=True or a RandomSampler).
    shuffled: bool
    start_method: str | None
    workers: list[WorkerGrowth]
    #: Where USS came from: /proc/PID/smaps_rollup, or /proc/PID/smaps on kernels before 4.14.
    source: str


class SetNumThreadsCall(TypedDict):
    """A `cv2.setNumThreads(...)` call in the source of the loader's modules."""

    where: str
    file: str
    line: int
    value: int | str | float | None


class OpenCvFacts(TypedDict, total=False):
    """SYS007: OpenCV as the loader's code has it (imported by the dataset's module, or in the workers)."""

    version: str | None
    #: cv2.getNumThreads() in the runner once the dataset was built, and in the workers (the largest).
    main_threads: int | None
    worker_threads: int | None
    worker_threads_num_workers: int
    set_num_threads_calls: list[SetNumThreadsCall]


class RunnerFacts(TypedDict, total=False):
    pid: int | None
    returncode: int | None
    killed_for: str | None
    wall_s: float
    peak_rss_bytes: int | None
    memory_cap_bytes: int | None
    shm_removed: list[str]
    #: The runner's multiprocessing folder (forkserver's socket), removed after a kill left it; else None.
    tempdir_removed: str | None


class TorchInfo(TypedDict, total=False):
    version: str
    import_s: float
    cuda_available: bool


class SourceFacts(TypedDict):
    kind: str


class _LoaderBase(TypedDict):
    dataset: str
    runs: list[RunFacts]
    skipped: list[SkipFacts]
    batch_bytes: int | None
    tensors_per_batch: int | None
    worker_rss_bytes: int | None
    current: CurrentSettings | None
    failure: FailureFacts | None


class LoaderFacts(_LoaderBase, total=False):
    """The `loader` facts section: what the smoke test measured, as the runner reported it."""

    source: SourceFacts
    budget_s: float
    step_time_s: float | None
    #: CPUs one training process may use: the usable CPUs divided by the processes per node.
    usable_cpus: int
    procs_per_node: int
    batch_size: int
    length: int | None
    iterable: bool
    start_method: str | None
    non_tensor_types: list[str]
    sample_types: list[str]
    getitem: GetitemFacts
    decoding: dict[str, object]
    persistent: PersistentFacts
    pin_memory: PinFacts
    pickle: PickleFacts
    paired: PairedFacts
    duplicates: DuplicatesFacts
    rng: RngFacts
    hazards: HazardsFacts
    memory: MemoryGrowthFacts
    opencv: OpenCvFacts
    torch: TorchInfo
    torch_probe: dict[str, object]
    runner: RunnerFacts
    runner_error: str | None
    wall_s: float


Bottleneck = Literal["getitem", "storage", "startup", "ipc", "cpu-saturated", "cpu-contended", "none"]
Trust = Literal["gain", "loss", "too-noisy", "incomplete", "unpaired", "same"]


class LeftOut(TypedDict):
    num_workers: int
    samples_per_s: float
    worker_runqueue: float | None


class Recommendation(TypedDict):
    num_workers: int
    prefetch_factor: int | None
    persistent_workers: bool
    pin_memory: bool
    samples_per_s: float
    best_samples_per_s: float
    left_out: list[LeftOut]
    current_samples_per_s: float | None
    gain: float | None
    #: The gain's 95% interval from the paired windows (candidate / current), or None unpaired.
    gain_interval: list[float] | None
    paired_windows: int
    #: knee: the fewest workers within 95% of the best; step: the fewest that outrun the step; current: the
    #: user's own kept; paired: the runner-up that beat the user's setting in the paired windows.
    basis: Literal["knee", "step", "current", "paired"]
    consumer_samples_per_s: float | None
    #: What the paired re-measurement said: a real gain, a loss, too noisy to tell, not paired; or that
    #: the budget ended before the curve up to the usable CPUs was measured (incomplete).
    trust: Trust
    #: With trust "incomplete": the worker counts the budget left unmeasured.
    unmeasured: list[int]
    #: The setting the sweep pointed at, when trust kept the user's own instead.
    candidate_num_workers: int | None
    #: Where current_samples_per_s comes from: "paired" (the median of the user's setting over the paired
    #: windows, so one slow sweep window does not decide the baseline) or "sweep" (its one sweep point).
    current_basis: Literal["paired", "sweep"]
    #: The user's setting as its sweep point measured it (differs from current_samples_per_s when paired).
    current_sweep_samples_per_s: float | None


class LoaderJudgement(TypedDict):
    """What the judge layer decides of a loader section (`envdoctor.judge.loader`), added to the report's
    `loader` object."""

    bottleneck: Bottleneck | None
    bottleneck_reason: str
    knee: int | None
    recommendation: Recommendation | None
    consumer_samples_per_s: float | None


class LoaderReport(LoaderFacts, total=False):
    """The report's top-level `loader` object: the facts with their judgement (`LoaderJudgement`)."""

    bottleneck: Bottleneck | None
    bottleneck_reason: str
    knee: int | None
    recommendation: Recommendation | None
    consumer_samples_per_s: float | None
