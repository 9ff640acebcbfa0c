"""The call-site log's files: ``<dir>/transfer-log-rank<R>.jsonl``, one per process under its real rank.

`transfer.calllog` decides what is recorded; a `Sink` writes this process's records
(JSON lines), renames them under the rank once it is known, and prints the job's one
summary at exit. Importing this module imports torch only when a rank is looked up.
"""

from __future__ import annotations

import atexit
import json
import os
import sys
import threading
import time
from collections import Counter
from typing import Any, Dict, List, Optional

class Sink:
    """Where this process's records go: ``transfer-log-rank<R>.jsonl`` under its real rank.

    The rank comes from RANK (torchrun and other launchers set it before the process starts), else
    from init_process_group (mp.spawn workers learn it there; `adopt_rank`). Until then records go to
    ``transfer-log-pid<PID>.jsonl``, whose lines are rewritten under the rank once it is known. A
    process that ends without a rank is the job's main process when other processes of its job logged
    under a rank (the parent of mp.spawn workers: ``transfer-log-main.jsonl``), else the job's only
    process (rank 0). The job is named in the environment by its first logging process
    (``_TRANSFER_LOG_JOB``), which every process it starts inherits; that first process prints the
    job's one summary at exit, when its workers have finished. (A launcher that does not run transfer
    leaves each rank first: there rank 0 prints its own summary.)
    """

    _current: Optional["Sink"] = None

    def __init__(self, directory: str):
        self.directory = directory
        os.makedirs(directory, exist_ok=True)
        inherited = os.environ.get(_JOB_ENV)
        self.first = inherited is None  # started the job's logging: prints its summary
        self.job = inherited or f"{os.getpid()}-{time.time_ns() if hasattr(time, 'time_ns') else time.time()}"
        os.environ[_JOB_ENV] = self.job
        self.owner_pid = os.getpid()
        rank = os.environ.get("RANK", "").strip()
        self.rank_from_env = rank.isdigit()
        self.rank: Optional[int] = int(rank) if self.rank_from_env else None
        self.name: Optional[str] = None if self.rank is None else f"rank{self.rank}"
        self.records: List[Dict[str, Any]] = []  # this process's records, every install
        self._file = None  # opened on the first record, so a process logging nothing writes nothing
        self._lock = threading.RLock()
        atexit.register(self.at_exit)

    @classmethod
    def of_process(cls, directory: str) -> "Sink":
        sink = cls._current
        if sink is None or sink.directory != directory or sink.owner_pid != os.getpid():  # a forked child: its own
            sink = cls._current = cls(directory)
        return sink

    def path(self, name: Optional[str] = None) -> str:
        name = name or self.name or f"pid{os.getpid()}"
        return os.path.join(self.directory, f"transfer-log-{name}.jsonl")

    def write(self, record: Dict[str, Any]) -> None:
        with self._lock:
            if self.rank is None:
                self.adopt_rank()
            record["rank"] = self.rank
            record["job"] = self.job
            self.records.append(record)
            if self._file is None:
                self._file = open(self.path(), "a", encoding="utf-8")
            self._file.write(json.dumps(record) + "\n")
            self._file.flush()

    def flush(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.flush()

    def adopt_rank(self, rank: Optional[int] = None) -> None:
        """Take the rank of the default process group (or `rank`) if this process has none yet."""
        with self._lock:
            if self.rank is not None:
                return
            if rank is None:
                dist = getattr(sys.modules.get("torch"), "distributed", None)
                if dist is None or not dist.is_available() or not dist.is_initialized():
                    return
                rank = dist.get_rank()
            self._rename(f"rank{rank}", rank)

    def _rename(self, name: str, rank: Optional[int]) -> None:
        """Move the records written so far to `name`'s file, each with `rank`."""
        provisional = self.path() if self._file is not None else None
        self.rank, self.name = rank, name
        for record in self.records:
            record["rank"] = rank
        if provisional is None:
            return
        self._file.close()
        self._file = open(self.path(), "a", encoding="utf-8")
        self._file.write("".join(json.dumps(r) + "\n" for r in self.records))
        self._file.flush()
        os.remove(provisional)

    def finish(self) -> None:
        """End this process's log now, as at exit: `transfer.uninstall` takes the log with the patches.

        The file gets its final name and is closed, the summary is printed by the process that prints
        it, and nothing is left for exit (a log directory removed after uninstall, a pytest temporary
        one, is never touched again). An install after it starts a new log (a new job).
        """
        atexit.unregister(self.at_exit)
        if Sink._current is self:
            Sink._current = None
        self.at_exit()
        if self.first and os.environ.get(_JOB_ENV) == self.job:
            del os.environ[_JOB_ENV]

    def at_exit(self) -> None:
        try:
            self._end()
        except OSError as exc:  # the directory went away or filled up: one line, never a traceback at exit
            sys.stderr.write(f"transfer: the call-site log in {self.directory} could not be completed: {exc}\n")

    def _end(self) -> None:
        with self._lock:
            if self.rank is None and self.name is None:
                self.adopt_rank()
            if self.rank is None and self.name is None and self.first:
                # The parent of ranked workers is the job's main process; alone, it is rank 0.
                if self._job_files(others_only=True):
                    self._rename("main", None)
                else:
                    self._rename("rank0", 0)
            if self._file is not None:
                self._file.close()
                self._file = None
            files = {}
            if self.first and not self.rank_from_env:  # the job's summary, once its workers have finished
                files = self._job_files()
            elif self.first and self.rank == 0:  # ranks started by a launcher without transfer: rank 0's own
                files = {os.path.basename(self.path()): self.records} if self.records else {}
            summary = self._summary(files)
            if summary:
                sys.stderr.write(summary + "\n")

    def _job_files(self, others_only: bool = False) -> Dict[str, List[Dict[str, Any]]]:
        """This job's records in the directory, by file name (other jobs may share the directory)."""
        found: Dict[str, List[Dict[str, Any]]] = {}
        try:
            names = sorted(os.listdir(self.directory))
        except OSError:
            return found
        for name in names:
            if not (name.startswith("transfer-log-") and name.endswith(".jsonl")):
                continue
            try:
                with open(os.path.join(self.directory, name), encoding="utf-8") as fh:
                    lines = fh.readlines()
            except OSError:
                continue
            for line in lines:
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                if record.get("job") == self.job and not (others_only and record.get("pid") == os.getpid()):
                    found.setdefault(name, []).append(record)
        return found

    def _summary(self, files: Dict[str, List[Dict[str, Any]]]) -> Optional[str]:
        records = [r for rs in files.values() for r in rs]
        if not records:
            return None
        counts = Counter(r["class"] for r in records)
        where = (os.path.join(self.directory, next(iter(files))) if len(files) == 1 else
                 f"{self.directory} ({', '.join(files)})")
        return (f"transfer: {len(records)} CUDA-facing call site(s) logged in {where} ("
                + ", ".join(f"{n} {c}" for c, n in sorted(counts.items())) + ")")


_JOB_ENV = "_TRANSFER_LOG_JOB"


def forget_process_log() -> None:
    """Drop this process's log state (its directory was removed): nothing is renamed or summarised at exit."""
    sink, Sink._current = Sink._current, None
    if sink is not None:
        atexit.unregister(sink.at_exit)
        with sink._lock:
            if sink._file is not None:
                sink._file.close()
                sink._file = None
        if sink.first and os.environ.get(_JOB_ENV) == sink.job:
            del os.environ[_JOB_ENV]
