"""The shared suffix cache's Ray transport (``specdraft.proposers.shared_cache``): the store as a
named Ray actor and the two calls a replica makes on it. Everything Ray-specific of the shared
cache is here; the store and the client are plain Python."""

from __future__ import annotations

from typing import Any

from specdraft.proposers.shared_cache import SharedCacheStore


def store_actor_class():
    """``SharedCacheStore`` as a Ray actor class."""
    import ray

    return ray.remote(SharedCacheStore)


def get_store(opts: dict, create: bool = True):
    """The named store actor (created on first use; Ray restarts it if its process dies)."""
    import ray

    if not ray.is_initialized():
        ray.init(address=opts["address"], namespace=opts["namespace"], log_to_driver=False,
                 ignore_reinit_error=True)
    if not create:
        return ray.get_actor(opts["name"], namespace=opts["namespace"])
    return store_actor_class().options(
        name=opts["name"], namespace=opts["namespace"], get_if_exists=True,
        lifetime="detached" if opts["detached"] else None, max_restarts=-1,
        max_task_retries=0, num_cpus=0).remote(opts["tokens"])


class RayStoreLink:
    """A replica's calls on the store actor, each bounded by ``timeout`` seconds."""

    def __init__(self, opts: dict, actor: Any = None):
        self.actor = actor if actor is not None else get_store(opts)

    def publish(self, origin: str, arrays: list, scopes: list | None, first: int,
                timeout: float) -> int:
        """Sends sequences (int32 arrays, their scopes or None; ``first``: the index of the
        first among all this origin sent, so a retry is not taken twice); the store's token
        count."""
        import ray

        return ray.get(self.actor.publish.remote(origin, arrays, scopes, first), timeout=timeout)

    def lost(self, error: BaseException) -> bool:
        """Whether a failed call means the store must be looked up again: not for a timeout,
        which a store whose process is still starting gives (a busy machine takes seconds to
        start it). The handle is then kept: a store this replica created (``detached`` false)
        is owned by it, and Ray ends an owned actor once its owner holds no handle to it (the
        replicas then kept re-creating it and losing it again)."""
        import ray

        return not isinstance(error, ray.exceptions.GetTimeoutError)

    def pull(self, cursor: int, origin: str, budget: int, timeout: float) -> tuple:
        """(generation, cursor, [(scope, sequence)]) published by others after ``cursor``."""
        import ray

        return ray.get(self.actor.pull.remote(cursor, origin, budget), timeout=timeout)


def connect(opts: dict, actor: Any = None) -> RayStoreLink:
    return RayStoreLink(opts, actor)
