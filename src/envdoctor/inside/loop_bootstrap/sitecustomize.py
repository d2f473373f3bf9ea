"""envdoctor run's bootstrap: observe DataLoaders in this interpreter, then hand over to the user's own sitecustomize."""
import os
import sys


def _chain_to_users_sitecustomize():
    here = os.path.dirname(os.path.abspath(__file__))
    from importlib.machinery import PathFinder
    from importlib.util import module_from_spec

    rest = [entry for entry in sys.path if os.path.abspath(entry or ".") != here]
    spec = PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


def _mark():
    """Carry the run's mark on to this process's children, should the program have dropped it: it is how
    `envdoctor run` finds every process of the command when it ends it, daemons included."""
    events = os.environ.get("ENVDOCTOR_LOOP_EVENTS")
    if events and not os.environ.get("ENVDOCTOR_RUN_MARK"):
        os.environ["ENVDOCTOR_RUN_MARK"] = events


def _start():
    try:
        import envdoctor_loop_observer
        envdoctor_loop_observer.install()
    except Exception as exc:  # the user's program runs whatever happens here
        sys.stderr.write("envdoctor run: the loop observer could not start: %s: %s\n" % (type(exc).__name__, exc))


_mark()
_start()
_chain_to_users_sitecustomize()
