"""transfer's replacements pickle, copy and introspect like torch's originals.

Patched functions, methods and classes pickle by reference (a process without transfer loads torch's
original; spawn workers receive them), deepcopy, answer isinstance/issubclass, and show the original's
name, signature and help(); an exception class is never replaced. The registry-wide checks walk every
record, so a patch added later is covered without a new test.
"""


import copy
import inspect
import os
import pickle
import pydoc
import subprocess
import sys
import types

import pytest
import torch

from conftest import ROOT, SCRIPTS, VENDORS, clean_env, needs_standins, python

#: Natively picklable generators: torch 2.0's Generator has no __reduce__/__setstate__, so
#: pickle, deepcopy and spawn-mode workers fail on it without transfer too.
GENERATORS_PICKLE = "__setstate__" in vars(torch._C.Generator)
NO_GENERATOR_PICKLE = f"torch {torch.__version__}'s Generator does not pickle (no __reduce__/__setstate__), natively"
#: Fewer records on older torch (torch 2.0: 149), which lacks some of the patched names.
MANY_RECORDS = 140


def _path(owner):
    """How a child process finds `owner`: ('module', name) or ('class', module, qualname)."""
    if isinstance(owner, types.ModuleType):
        return ("module", owner.__name__)
    return ("class", owner.__module__, owner.__qualname__)


def _owner(path):
    import functools
    import importlib

    module = importlib.import_module(path[1])
    return module if path[0] == "module" else functools.reduce(getattr, path[2].split("."), module)


def _native_facts(records):
    """With transfer uninstalled: what each patched attribute is natively."""
    facts = {}
    for r in records:
        obj = getattr(r.owner, r.attribute, None)
        try:
            pickle.dumps(obj)
            pickles = True
        except Exception:
            pickles = False
        try:
            signature = str(inspect.signature(obj)) if callable(obj) else None
        except (TypeError, ValueError) as exc:
            signature = type(exc)
        facts[r.name] = dict(obj=obj, pickles=pickles, signature=signature, missing=not hasattr(r.owner, r.attribute),
                             names={a: getattr(obj, a, None) for a in ("__name__", "__module__", "__qualname__", "__doc__")})
    return facts


def _problems(record, native):
    """Every way the installed replacement differs from the native object, as text."""
    obj = getattr(record.owner, record.attribute)
    if not (callable(obj) or inspect.isclass(obj)):
        return []  # constants, namespaces and data descriptors (Tensor.is_cuda): see presentation.py
    found = []
    if native["pickles"]:
        try:
            back = pickle.loads(pickle.dumps(obj))
            if not (back is obj or back == obj):
                found.append(f"unpickles to {back!r}")
        except Exception as exc:
            found.append(f"pickle: {type(exc).__name__}: {exc}")
    if copy.copy(obj) is not obj or copy.deepcopy(obj) is not obj and copy.deepcopy(obj) != obj:
        found.append("copy/deepcopy made a new object")
    if native["missing"]:
        return found  # added where torch lacks it (torch._C's CUDA entry points on a CPU build): no native to mirror
    names = native["names"]
    for attribute in ("__name__", "__doc__"):
        if names[attribute] is not None and getattr(obj, attribute, None) != names[attribute]:
            found.append(f"{attribute}: {getattr(obj, attribute, None)!r:.60} != {names[attribute]!r:.60}")
    ours = (obj.__module__, obj.__qualname__)
    if ours != (names["__module__"], names["__qualname__"]):
        # Allowed only where the original's reference names another place, which still
        # holds the original: then ours must name a place that holds ours (where it is
        # installed; for a rebound copy, ``from torch import tensor`` in a library module,
        # the public place the same replacement is installed at).
        from transfer.presentation import resolve

        if resolve(names["__module__"], names["__qualname__"]) is obj or resolve(*ours) is not obj:
            found.append(f"names {ours} != native {(names['__module__'], names['__qualname__'])}")
    if callable(obj) and not inspect.isclass(obj):
        if inspect.unwrap(obj) is not inspect.unwrap(native["obj"]):
            found.append("__wrapped__ does not lead to the original")
        try:
            signature = str(inspect.signature(obj))
        except (TypeError, ValueError) as exc:
            signature = type(exc)
        if signature != native["signature"]:
            found.append(f"signature {signature} != native {native['signature']}")
    first_doc_line = (names["__doc__"] or "").strip().split("\n")[0].strip()
    if first_doc_line and first_doc_line not in pydoc.render_doc(obj, renderer=pydoc.plaintext):
        found.append("help() does not show the original's doc")
    return found


@pytest.mark.compat  # walks whatever this torch has patched: the check that matters per torch version
def test_every_record_pickles_copies_and_introspects_as_native(cpu_target):
    records = cpu_target._active.registry.records()
    cpu_target.uninstall()
    native = _native_facts(records)
    cpu_target.install("cpu")
    records = cpu_target._active.registry.records()
    assert len(records) > MANY_RECORDS, len(records)
    problems = {r.name: p for r in records for p in [_problems(r, native[r.name])] if p}
    assert not problems, "\n".join(f"{k}: {v}" for k, v in problems.items())


CHILD_LOADS = """
import pickle, sys, functools, importlib
import torch
{setup}
def owner(path):
    module = importlib.import_module(path[1])
    return module if path[0] == "module" else functools.reduce(getattr, path[2].split("."), module)
wrong = []
for name, path, attribute, data in pickle.loads(sys.stdin.buffer.read()):
    loaded = pickle.loads(data)
    expected = getattr(owner(path), attribute)
    if not (loaded is expected or loaded == expected):
        wrong.append(f"{{name}}: {{loaded!r}} is not {{expected!r}}")
print("WRONG" if wrong else "LOADED", len(wrong), *wrong, sep="\\n")
"""


def _loaded(stdout: bytes) -> bool:
    """The child's verdict: its "LOADED" line (a library the originals live in may print first: importing
    DeepSpeed to load its originals logs its accelerator choice on stdout)."""
    lines = stdout.decode().splitlines()
    return "LOADED" in lines and "WRONG" not in lines


def _pickled_records(registry):
    out = []
    from transfer.registry import MISSING

    for r in registry.records():
        obj = getattr(r.owner, r.attribute)
        if r.original is MISSING:
            continue  # added where torch lacks it: a process without transfer has nothing to load
        if callable(obj) or inspect.isclass(obj):
            try:
                out.append((r.name, _path(r.owner), r.attribute, pickle.dumps(obj)))
            except Exception:
                pass  # natively unpicklable objects; the in-process test holds the rest to native
    return out


@pytest.mark.slow
def test_pickled_references_load_the_original_in_a_process_without_transfer(cpu_target):
    payload = _pickled_records(cpu_target._active.registry)
    assert len(payload) > MANY_RECORDS, len(payload)
    proc = subprocess.run([sys.executable, "-c", CHILD_LOADS.format(setup="")], input=pickle.dumps(payload),
                          capture_output=True, env=clean_env(PYTHONPATH=ROOT), cwd=ROOT, timeout=240)
    assert _loaded(proc.stdout), proc.stdout.decode() + proc.stderr.decode()[-3000:]


@needs_standins
def test_vendor_records_pickle_by_reference_across_processes(tmp_path):
    """On the sdaa stand-in (in a subprocess: stand-ins never load into this process),
    every record pickles, and a process without transfer or the vendor loads torch's original."""
    script = tmp_path / "dump.py"
    script.write_text(
        "import pickle, sys, torch, transfer\n"
        "transfer.install('sdaa')\n"
        f"sys.path.insert(0, {os.path.join(ROOT, 'tests')!r})\n"
        "from test_pickling_and_introspection import _owner, _pickled_records\n"
        "records = _pickled_records(transfer._active.registry)\n"
        "for name, path, attribute, data in records:  # with transfer: the replacement\n"
        "    assert pickle.loads(data) == getattr(_owner(path), attribute), name\n"
        f"open({str(tmp_path / 'records.pkl')!r}, 'wb').write(pickle.dumps(records))\n"
        "print('DUMPED', len(records))\n")
    proc = python(str(script), env=clean_env(PYTHONPATH=os.pathsep.join([ROOT, VENDORS]), TRANSFER_QUIET=1),
                  timeout=600)
    assert "DUMPED" in proc.stdout and int(proc.stdout.split()[-1]) > MANY_RECORDS, proc.stdout
    data = (tmp_path / "records.pkl").read_bytes()
    child = subprocess.run([sys.executable, "-c", CHILD_LOADS.format(setup="")], input=data, capture_output=True,
                           env=clean_env(PYTHONPATH=ROOT), cwd=ROOT, timeout=240)
    assert _loaded(child.stdout), child.stdout.decode() + child.stderr.decode()[-3000:]


def test_pickled_references_load_the_replacement_under_transfer(cpu_target):
    import functools

    factory = pickle.loads(pickle.dumps(functools.partial(torch.zeros, 2, device="cuda")))
    assert factory.func is torch.zeros and factory().device.type == "cpu"
    for obj in (torch.zeros, torch.Tensor.to, torch.Tensor.cuda, torch.load, torch.cuda.set_device,
                torch.Generator, torch.cuda.Event, torch.distributed.init_process_group,
                torch.utils.data.DataLoader.__init__):
        assert pickle.loads(pickle.dumps(obj)) == obj and copy.deepcopy(obj) == obj, obj


@pytest.mark.skipif(not GENERATORS_PICKLE, reason=NO_GENERATOR_PICKLE)
def test_generators_pickle_and_copy(cpu_target):
    g = torch.Generator("cuda")
    g.manual_seed(11)
    expected = torch.rand(3, generator=copy.deepcopy(g))
    for clone in (pickle.loads(pickle.dumps(g)), copy.deepcopy(g)):
        assert isinstance(clone, torch.Generator) and torch.equal(torch.rand(3, generator=clone), expected)


def test_instances_of_replaced_classes_pickle_and_copy(cpu_target):
    # torch.amp.GradScaler("cuda") is torch >= 2.3; torch.cuda.amp.GradScaler is what older scripts write
    scaler = (torch.amp.GradScaler("cuda", init_scale=8.0) if hasattr(torch.amp, "GradScaler")
              else torch.cuda.amp.GradScaler(init_scale=8.0))
    assert pickle.loads(pickle.dumps(scaler)).get_scale() == 8.0 and copy.deepcopy(scaler).get_scale() == 8.0
    event = torch.cuda.Event(enable_timing=True)
    for clone in (pickle.loads(pickle.dumps(event)), copy.deepcopy(event)):
        assert isinstance(clone, torch.cuda.Event) and clone.enable_timing
    stream = torch.cuda.Stream()
    assert isinstance(copy.deepcopy(stream), torch.cuda.Stream)
    with torch.autocast("cuda"):
        pass
    assert pickle.loads(pickle.dumps(torch.nn.Linear(2, 2).cuda())).weight.device.type == "cpu"


def test_isinstance_and_issubclass_with_replaced_classes(cpu_target):
    assert isinstance(torch.Generator(), torch.Generator) and isinstance(torch._C.Generator(), torch.Generator)
    assert issubclass(torch._C.Generator, torch.Generator) and issubclass(torch.Generator, torch._C.Generator)

    class Seeded(torch.Generator):  # a user's subclass keeps the ordinary answer
        pass

    assert not isinstance(torch.Generator(), Seeded) and issubclass(Seeded, torch.Generator)
    assert isinstance(torch.cuda.current_stream(), torch.cuda.Stream)
    assert isinstance(torch.cuda.Event(), torch.cuda.Event)
    assert type(torch.Generator()).__name__ == "Generator"


@pytest.mark.slow
@pytest.mark.skipif(not GENERATORS_PICKLE, reason=NO_GENERATOR_PICKLE)
def test_spawn_workers_receive_pickled_generators_and_factories(tmp_path):
    """A Dataset holding a torch.Generator (spawn DataLoader workers) and a
    functools.partial(torch.zeros, ..., device='cuda') sent to mp.spawn, transfer
    active in every process (python -m transfer)."""
    env = clean_env(PYTHONPATH=ROOT, TRANSFER_DEVICE="cpu", TRANSFER_QUIET=1, TRANSFER_CPU_DEVICES=2)
    proc = python("-m", "transfer", os.path.join(SCRIPTS, "spawn_pickles.py"), str(tmp_path / "out"), env=env,
                  timeout=300)
    assert "SPAWN OK cpu cpu cpu" in proc.stdout, proc.stdout + proc.stderr


@pytest.mark.slow
@pytest.mark.skipif(not GENERATORS_PICKLE, reason=NO_GENERATOR_PICKLE)
def test_spawn_loader_workers_without_transfer_load_the_originals(cpu_target, monkeypatch):
    """transfer installed in this process only: spawn DataLoader workers (no transfer)
    unpickle a Dataset holding torch's original Generator, as they would natively."""
    import torch.multiprocessing as mp
    from torch.utils.data import DataLoader

    monkeypatch.syspath_prepend(SCRIPTS)  # spawn children get this sys.path
    import spawn_pickles

    # this machine's /dev/shm refuses the fd strategy, natively too; restored after the test
    monkeypatch.setattr(mp, "_sharing_strategy", "file_system")
    loader = DataLoader(spawn_pickles.Noisy(), batch_size=2, num_workers=1, multiprocessing_context="spawn",
                        collate_fn=list)
    assert [len(batch) for batch in loader] == [2, 2]


@pytest.mark.slow
@pytest.mark.compat
def test_spawn_workers_without_transfer_load_the_originals(cpu_target, tmp_path, monkeypatch):
    """transfer installed in this process only: mp.spawn workers (no transfer) unpickle
    torch's original torch.zeros from a functools.partial, as they would natively."""
    import functools

    import torch.multiprocessing as mp

    monkeypatch.syspath_prepend(SCRIPTS)  # spawn children get this sys.path
    import spawn_pickles

    out = str(tmp_path / "out")
    mp.spawn(spawn_pickles.worker, args=(functools.partial(torch.zeros, 3), out), nprocs=1)
    assert torch.load(f"{out}.0")["device"] == "cpu"


@pytest.mark.compat
def test_except_torch_cuda_out_of_memory_error_still_catches(install_cpu):
    """An exception class is never replaced: torch 2.0 lists OutOfMemoryError in torch.cuda.__all__,
    and a replacement that is no exception makes every `except torch.cuda.OutOfMemoryError:` a TypeError."""
    original = getattr(torch.cuda, "OutOfMemoryError", None)
    install_cpu()
    if original is None:
        pytest.fail("this torch has no torch.cuda.OutOfMemoryError")
    assert torch.cuda.OutOfMemoryError is original
    with pytest.raises(ValueError):
        try:
            raise ValueError("not an OOM")
        except torch.cuda.OutOfMemoryError:
            pytest.fail("caught a ValueError")
