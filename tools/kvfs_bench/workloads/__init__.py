"""The workloads, one module each; each is a mixin of Bench (kvfs_bench.bench)
that runs one round of it."""
from .batch import BatchWorkload
from .eviction import EvictionWorkload
from .fio import FioWorkload
from .lmcache import LmcacheWorkload
from .lookup import LookupWorkload
from .restore import RestoreWorkload
from .vllm import VllmWorkload
from .wholeseq import WholeseqWorkload

__all__ = ["BatchWorkload", "EvictionWorkload", "FioWorkload", "LmcacheWorkload",
           "LookupWorkload", "RestoreWorkload", "VllmWorkload", "WholeseqWorkload"]
