"""What a training script does when it runs, read from its syntax tree alone.

The spawn guard check (SPW001), the start-method check (SPW002) and the
notebook check (SPW005) need to know where a script starts worker processes
and whether that happens at import time, i.e. outside
`if __name__ == "__main__":`. Under the spawn and forkserver start methods
every worker re-imports the main script, so whatever runs at import time runs
again in each worker; a worker start there dies with "An attempt has been
made to start a new process before the current process has finished its
bootstrapping phase". A notebook is not re-run: there the failure is an object
it defines that the workers must unpickle.

The script is never imported or executed. The walk follows it the way the
interpreter would run it: module-level statements in order, the bodies of
`if`/`with`/`try`/loops, the functions and classes the module level calls
(with the call's arguments bound to the parameters), generators and
coroutines when they are consumed, and the project's own modules it imports
(their module level runs at import; their functions when called). Values are
tracked just enough to follow DataLoaders, processes, pools and contexts
through names, attributes, returns, containers and `**kwargs` dicts.

What starts workers (checked against torch's own code: constructing a
DataLoader starts nothing, `DataLoader.__iter__` creates
`_MultiProcessingDataLoaderIter`, whose `__init__` calls `w.start()`):
iterating a DataLoader with num_workers > 0, `Process.start()`, constructing a
`multiprocessing.Pool` or `Manager`, `ProcessPoolExecutor.submit/map`,
`torch.multiprocessing.spawn/start_processes`, and Lightning's
`Trainer.fit/validate/test/predict`.

Modules: `names` (the known-name tables), `values` (the value lattice),
`syntax` (questions the tree alone answers), `reading` (bounded reads),
`project` (finding the project's modules), `libraries` (library classes and
functions that are or return DataLoaders, read from the target's installed
source, else the catalog's table), `notebook` (code cells as one
module), and the interpreter, split by concern: `walker` → `statements` →
`expressions` → `starts` → `calls` → `analysis`.
"""
from __future__ import annotations

from envdoctor.analysis.spawn.analysis import analyse_source
from envdoctor.analysis.spawn.syntax import guard_polarity

__all__ = ["analyse_source", "guard_polarity"]
