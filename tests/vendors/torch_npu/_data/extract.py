"""Regenerate the npu stand-in's strictness data from torch_npu's own sources (run by hand, never in CI).

    python tests/vendors/torch_npu/_data/extract.py --op-plugin GITDIR --ascend-pytorch GITDIR \
        --aclnn-dtypes aclnn_dtypes.json [--wheels DIR]

Inputs, all public:

* the torch_npu wheels on PyPI, one per torch minor version (``WHEELS``; downloaded into ``--wheels`` with
  ``PIP_CONFIG_FILE=/dev/null pip download --no-deps`` when missing): ``torch_npu/csrc/aten/
  npu_native_functions_by_codegen.yaml`` (the aten overloads torch_npu registers for PrivateUse1, i.e. the
  ones that do not fall back to the CPU), ``torch_npu/version.py`` (the Ascend/pytorch commit it was built
  from) and the strings of ``torch_npu/lib/libtorch_npu.so`` (which messages and switches that build has);
* a git checkout of Ascend/op-plugin (``op_plugin/config/op_plugin_functions.yaml``, gated per torch version
  as ``torchnpugen/op_codegen_utils.py:get_version`` does; ``op_plugin/ops/opapi/*.cpp``: which aclnn API each
  aten kernel calls);
* a git checkout of Ascend/pytorch (the fallback and ``_to_copy`` sources quoted in ``messages.json``);
* ``aclnn_dtypes.json``: aclnn API -> the dtypes its "should be in dtype support list [...]" error names,
  gathered from DeepLink-org/ditorch@68ac0e4 ``test/ascend_summary_of_pytorch_test_case_testing.csv.tar``
  (torch_npu 2.1.0.post3 on an Ascend 910B).

Outputs (committed beside this script, read by ``torch_npu/_strict.py`` at import):

* ``supported_ops.txt``: one aten overload a line with the torch versions whose torch_npu registers it;
  the header names, per torch version, the wheel (version, sha256, Ascend/pytorch commit) or the nearest one;
* ``aclnn.json``: op-plugin kernel name (``mm``, ``mm_out``, ``sort``...) -> aclnn APIs it calls -> dtypes;
* ``messages.json``: per torch version, the texts and switches of that build, with the source lines quoted.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
TORCH_MINORS = [f"2.{m}" for m in range(1, 16)]
# torch minor -> the newest torch_npu wheel on PyPI for it (None: no wheel; see NEAREST).
WHEELS = {
    "2.1": "2.1.0.post17", "2.2": None, "2.3": "2.3.1.post6", "2.4": "2.4.0.post4", "2.5": "2.5.1.post1",
    "2.6": "2.6.0.post5", "2.7": "2.7.1.post11", "2.8": "2.8.0.post5", "2.9": "2.9.1", "2.10": "2.10.0.post7",
    "2.11": "2.11.0.post3", "2.12": "2.12.0.post3", "2.13": "2.13.0", "2.14": "2.14.0", "2.15": None,
}
# torch minors without a wheel: the nearest wheel's data, corrected by op-plugin's version gates.
NEAREST = {"2.2": "2.1", "2.15": "2.14"}
CODEGEN_YAML = "torch_npu/csrc/aten/npu_native_functions_by_codegen.yaml"
SO = "torch_npu/lib/libtorch_npu.so"


def sh(*args, cwd=None) -> str:
    return subprocess.check_output(args, cwd=cwd, text=True)


def overload_name(entry) -> str:
    """``name.overload`` of a yaml entry (a bare string or a dict whose ``func`` is a schema)."""
    if isinstance(entry, str):
        return entry.strip()
    return entry["func"].split("(")[0].strip()


def wheel_path(wheels: Path, version: str) -> Path:
    found = sorted(wheels.glob(f"torch_npu-{version}-*.whl"))
    if not found:
        for py in ("3.10", "3.11"):
            rc = subprocess.call(
                [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "--python-version",
                 py, "--platform", "manylinux_2_28_x86_64", "--platform", "manylinux_2_17_x86_64",
                 "--platform", "manylinux2014_x86_64", f"torch_npu=={version}", "-d", str(wheels)],
                env={"PIP_CONFIG_FILE": "/dev/null", "PATH": "/usr/bin:/bin"})
            if rc == 0:
                break
        found = sorted(wheels.glob(f"torch_npu-{version}-*.whl"))
    if not found:
        raise SystemExit(f"torch_npu {version}: no wheel in {wheels} and pip download failed")
    return found[0]


def read_wheel(path: Path) -> dict:
    with zipfile.ZipFile(path) as z:
        codegen = yaml.safe_load(z.read(CODEGEN_YAML))
        version_py = z.read("torch_npu/version.py").decode()
        so = z.read(SO)
    strings = set(re.findall(rb"[\x20-\x7e]{6,}", so))
    commit = re.search(r"git_version = '([0-9a-f]+)'", version_py).group(1)
    return {
        "wheel": path.name,
        "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
        "commit": commit,
        "supported": sorted({overload_name(e) for e in codegen["supported"]}),
        "strings": {s.decode() for s in strings},
    }


def get_version(ver, all_version):
    """torchnpugen/op_codegen_utils.py:get_version, verbatim in behaviour."""
    if ver is None:
        return []
    if isinstance(ver, list):
        start = all_version.index(ver[0])
        end = None if ver[1] == "newest" else all_version.index(ver[1])
        return all_version[start:end + 1] if end is not None else all_version[start:]
    if ver == "all_version":
        return all_version
    return ver.split(", ") if ", " in ver else ver.split(",")


def op_plugin_gates(op_plugin: Path) -> tuple[dict, str]:
    """torch minor -> the aten overloads op-plugin's yaml registers for it (official and symint, as
    torchnpugen/gen_op_plugin_functions.py keeps them)."""
    text = sh("git", "show", "HEAD:op_plugin/config/op_plugin_functions.yaml", cwd=op_plugin)
    commit = sh("git", "rev-parse", "HEAD", cwd=op_plugin).strip()
    doc = yaml.safe_load(text)
    all_version = doc["all_version"]
    custom = {overload_name(e).split(".")[0] for e in doc.get("custom") or []}
    gates = {}
    for minor in TORCH_MINORS:
        v = "v" + minor
        names = set()
        for key in ("official", "symint"):
            for item in doc.get(key) or []:
                vs = (get_version(item.get("acl_op"), all_version) + get_version(item.get("op_api"), all_version)
                      + get_version(item.get("sparse"), all_version))
                name = overload_name(item)
                if v in vs and name.split(".")[0] not in custom:
                    names.add(name)
        gates[minor] = names
    return gates, commit


FUNC = re.compile(r"^(?:(?:static|inline)\s+)*(?:[A-Za-z_][\w:]*(?:<[^;{}()]*?>)?[\s&\*]+)+([a-z_][a-z0-9_]*)\s*\(", re.M)
API = re.compile(r"(?:EXEC_NPU_(?:NO_FORMAT_CHECK_)?CMD\w*|DO_COMPATIBILITY|DO_MATMUL_COMPATIBILITY)\(\s*(aclnn\w+)")
# A kernel that hands complex tensors to its aclnn APIs as pairs of reals (op-plugin's FFT kernels:
# FFTc2cKernelNpuOpApi.cpp HackComplexintoFloat): the APIs' dtype lists apply to the real value type.
AS_REAL = re.compile(r"\bHackComplexintoFloat\s*\(")
COMPLEX_AS_REAL = "complex_as_real"  # opapi_map's mark of such a kernel, and the rule's third element


def opapi_map(op_plugin: Path) -> dict:
    """op-plugin kernel name -> sorted aclnn APIs its body (or a helper of the same file it calls) runs."""
    files = sh("git", "ls-tree", "--name-only", "HEAD", "op_plugin/ops/opapi/", cwd=op_plugin).split()
    result: dict[str, set] = {}
    for f in files:
        if not f.endswith(".cpp"):
            continue
        src = sh("git", "show", f"HEAD:{f}", cwd=op_plugin)
        bodies: dict[str, str] = {}
        for m in FUNC.finditer(src):
            i = src.find("{", m.end())
            semi = src.find(";", m.end())
            if i < 0 or (0 <= semi < i):
                continue  # a declaration
            depth, j = 0, i
            while j < len(src):
                depth += {"{": 1, "}": -1}.get(src[j], 0)
                if depth == 0:
                    break
                j += 1
            bodies[m.group(1)] = bodies.get(m.group(1), "") + src[i:j + 1]
        direct = {name: set(API.findall(body)) | ({COMPLEX_AS_REAL} if AS_REAL.search(body) else set())
                  for name, body in bodies.items()}
        for name, body in bodies.items():
            apis = set(direct[name])
            for helper in bodies:
                if helper != name and re.search(rf"\b{helper}\s*\(", body):
                    apis |= direct[helper]
                    for inner in bodies:  # one more level (xxx_out_nocheck helpers)
                        if inner not in (name, helper) and re.search(rf"\b{inner}\s*\(", bodies[helper]):
                            apis |= direct[inner]
            if apis:
                result.setdefault(name, set()).update(apis)
    doc = yaml.safe_load(sh("git", "show", "HEAD:op_plugin/config/op_plugin_functions.yaml", cwd=op_plugin))
    def cpp_name(item) -> str:
        name = overload_name(item)
        args = item["func"].split("->")[0]
        is_out = "*" in args and "!)" in args.split("*", 1)[1]
        return name.split(".")[0] + ("_out" if is_out else "")

    items = [it for key in ("official", "symint") for it in doc.get(key) or []]
    by_overload = {overload_name(it): it for it in items}
    for item in items:  # ops generated from the yaml (gen_opapi: exec: aclnnXxx), and what delegates to them
        gen = item.get("gen_opapi") or {}
        source = item
        if not gen.get("exec"):
            target = item.get("structured_delegate") or gen.get("structured_inherit")
            source = by_overload.get(target, {})
        api = ((source.get("gen_opapi") or {}).get("exec") or "") if source else ""
        if isinstance(api, str) and api.startswith("aclnn"):
            result.setdefault(cpp_name(item), set()).add(api.split(",")[0].strip())
    return {k: sorted(v) for k, v in sorted(result.items())}


def sparse_ops(native_functions: Path, op_plugin: Path) -> str:
    """What torch_npu registers for SparsePrivateUse1: the ATen kernels whose SparseCPU and SparseCUDA kernels
    are the same function (torchnpugen/utils.py get_target_native_registration, read in Ascend/pytorch since
    v2.1.0) and op-plugin's ``sparse:`` entries (all gated [v2.1, newest])."""
    doc = yaml.load(native_functions.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    version_py = (native_functions.parents[4] / "torch" / "version.py").read_text()
    torch_version = re.search(r"__version__ = '([^']+)'", version_py).group(1)
    generic = set()
    for entry in doc:
        kernels = {}
        for keys, kernel in (entry.get("dispatch") or {}).items():
            for key in keys.split(","):
                kernels[key.strip()] = kernel
        if "SparseCPU" in kernels and kernels["SparseCPU"] == kernels.get("SparseCUDA"):
            generic.add(overload_name(entry))
    plugin = yaml.safe_load(sh("git", "show", "HEAD:op_plugin/config/op_plugin_functions.yaml", cwd=op_plugin))
    own = {overload_name(e) for key in ("official", "symint") for e in plugin.get(key) or [] if e.get("sparse")}
    commit = sh("git", "rev-parse", "HEAD", cwd=op_plugin).strip()
    lines = ["# torch_npu: aten overloads it registers for sparse tensors on its device (SparsePrivateUse1); any other",
             "# operator on a sparse npu tensor raises (VariableFallbackKernel.cpp npu_Sparse_fallback). Generated by",
             f"# extract.py from torch {torch_version}'s native_functions.yaml",
             f"# ({len(generic)} with one kernel for SparseCPU and SparseCUDA) and op-plugin@{commit[:12]}'s sparse "
             f"entries ({len(own)})."]
    return "\n".join(lines + sorted(generic | own)) + "\n"


def ranges(minors: list[str]) -> str:
    idx = sorted(TORCH_MINORS.index(m) for m in minors)
    out, start = [], idx[0]
    for a, b in zip(idx, idx[1:] + [None]):
        if b != a + 1:
            out.append(TORCH_MINORS[start] if start == a else f"{TORCH_MINORS[start]}-{TORCH_MINORS[a]}")
            start = b
    return ",".join(out)


def quote(repo: Path, rev: str, path: str, needle: str, label: str) -> dict:
    """The whole C++ statement around the line with ``needle`` (from the line that opens it to its ``;``)."""
    text = sh("git", "show", f"{rev}:{path}", cwd=repo)
    commit = sh("git", "rev-parse", rev, cwd=repo).strip()
    lines = text.splitlines()
    for n, line in enumerate(lines):
        if needle in line:
            start = n
            while start > 0 and not re.search(r"TORCH_\w+\(|^\s*(?:\w+::)*\w+\(|^\s*if \(|^\s*return |= ", lines[start]):
                start -= 1
            end = n
            while not lines[end].rstrip().endswith((";", "{", "}", ")")):
                end += 1
            code = "\n".join(lines[start:end + 1])
            return {"source": f"{label}@{commit[:12]}:{path}:{start + 1}-{end + 1}", "code": code}
    raise SystemExit(f"{needle!r} not in {label}@{rev}:{path}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--wheels", type=Path, default=Path("/tmp/torch_npu_wheels"))
    ap.add_argument("--op-plugin", type=Path, required=True, help="git dir of Ascend/op-plugin (master)")
    ap.add_argument("--ascend-pytorch", type=Path, required=True, help="git dir of Ascend/pytorch")
    ap.add_argument("--aclnn-dtypes", type=Path, required=True, help="aclnn API -> dtypes (from ditorch's table)")
    ap.add_argument("--torch-native-functions", type=Path, required=True,
                    help="torchgen/packaged/ATen/native/native_functions.yaml of a torch (sparse kernels)")
    args = ap.parse_args()
    args.wheels.mkdir(parents=True, exist_ok=True)

    wheels = {m: read_wheel(wheel_path(args.wheels, v)) for m, v in WHEELS.items() if v}
    gates, op_plugin_commit = op_plugin_gates(args.op_plugin)
    per_version: dict[str, set] = {}
    header = []
    for minor in TORCH_MINORS:
        if minor in wheels:
            w = wheels[minor]
            per_version[minor] = set(w["supported"])
            header.append(f"# {minor}: {w['wheel']} sha256 {w['sha256']} (Ascend/pytorch {w['commit']}), "
                          f"{CODEGEN_YAML} `supported`: {len(per_version[minor])}")
        else:
            near = NEAREST[minor]
            added = gates[minor] - gates[near]
            removed = gates[near] - gates[minor]
            per_version[minor] = (set(wheels[near]["supported"]) | added) - removed
            header.append(f"# {minor}: no torch_npu wheel on PyPI; nearest {wheels[near]['wheel']}, corrected by "
                          f"op-plugin@{op_plugin_commit[:12]}'s gates v{near} -> v{minor} (+{sorted(added)} "
                          f"-{sorted(removed)}): {len(per_version[minor])}")
    for minor in TORCH_MINORS:
        header.append(f"#   op-plugin@{op_plugin_commit[:12]} op_plugin_functions.yaml gates v{minor}: "
                      f"{len(gates[minor])} aten overloads (cross-check; the wheels add torch_npu's own "
                      f"npu_native_functions.yaml and their release branch's op-plugin)")
    ops = sorted(set().union(*per_version.values()))
    lines = ["# torch_npu: aten overloads it registers for its device (PrivateUse1), per torch minor version.",
             "# Anything else falls back to the CPU (VariableFallbackKernel.cpp). Generated by extract.py; do not",
             "# edit. One `name.overload<TAB>torch minors` a line. Sources:"] + header
    lines += [f"{op}\t{ranges([m for m in TORCH_MINORS if op in per_version[m]])}" for op in ops]
    (HERE / "supported_ops.txt").write_text("\n".join(lines) + "\n")

    dtypes_in = json.loads(args.aclnn_dtypes.read_text())
    dtypes = {api: sorted({d.strip("[], ") for d in v}) for api, v in sorted(dtypes_in.items())}
    mapping = opapi_map(args.op_plugin)
    kernels = {k: [a for a in apis if a != COMPLEX_AS_REAL] for k, apis in mapping.items()}
    kernels = {k: apis for k, apis in kernels.items() if apis}
    # what the stand-in reads: kernel -> [aclnn API named in refusals, dtypes it accepts or None(, "complex_as_real")]
    rules = {}
    for kernel, apis in kernels.items():
        known = [a for a in apis if a in dtypes]
        rules[kernel] = [known[0], sorted(set().union(*(dtypes[a] for a in known)))] if known else [apis[0], None]
        if COMPLEX_AS_REAL in mapping[kernel]:
            rules[kernel].append(COMPLEX_AS_REAL)
    (HERE / "aclnn.json").write_text(json.dumps({
        "provenance": {
            "dtypes": f"{args.aclnn_dtypes.name}: from the EZ1001 errors of DeepLink-org/ditorch@68ac0e4 "
                      "test/ascend_summary_of_pytorch_test_case_testing.csv.tar (torch_npu 2.1.0.post3, Ascend 910B)",
            "kernels": f"Ascend/op-plugin@{op_plugin_commit}: op_plugin/ops/opapi/*.cpp (EXEC_NPU_CMD of each "
                       "kernel and of the helpers of its file it calls) and op_plugin_functions.yaml gen_opapi.exec",
        },
        "dtypes": dtypes,
        "kernels": kernels,
        "rules": rules,
    }, indent=1, sort_keys=True) + "\n")

    (HERE / "sparse_ops.txt").write_text(sparse_ops(args.torch_native_functions, args.op_plugin))

    ap_repo = args.ascend_pytorch
    messages = {"provenance": "strings of torch_npu/lib/libtorch_npu.so of each wheel (WHEELS); quotes from "
                              "Ascend/pytorch at the commit named", "versions": {}, "quotes": {
        "fallback_warning": quote(ap_repo, "master", "torch_npu/csrc/aten/VariableFallbackKernel.cpp",
                                  "is not currently supported \",", "Ascend/pytorch"),
        "fallback_warning_end": quote(ap_repo, "master", "torch_npu/csrc/aten/VariableFallbackKernel.cpp",
                                      "This may have performance implications", "Ascend/pytorch"),
        "sparse_error": quote(ap_repo, "master", "torch_npu/csrc/aten/VariableFallbackKernel.cpp",
                              "is not currently supported on the NPU backend.\",", "Ascend/pytorch"),
        "fallback_disabled": quote(ap_repo, "master", "torch_npu/csrc/framework/utils/CpuFallbackUtils.h",
                                   "but CPU fallback is disabled by", "Ascend/pytorch"),
        "fallback_disabled_kind": quote(ap_repo, "master", "torch_npu/csrc/framework/utils/CpuFallbackUtils.h",
                                        "dispatcher backend fallback", "Ascend/pytorch"),
        "fallback_disabled_reason": quote(ap_repo, "master", "torch_npu/csrc/aten/VariableFallbackKernel.cpp",
                                          "no kernel is registered for the NPU", "Ascend/pytorch"),
        "double_cast": quote(ap_repo, "master", "torch_npu/csrc/aten/common/ToKernelNpu.cpp",
                             "Device do not support double dtype now", "Ascend/pytorch"),
        "double_cast_when": quote(ap_repo, "master", "torch_npu/csrc/aten/common/ToKernelNpu.cpp",
                                  "dtype.has_value() && !layout.has_value() && !device.has_value()", "Ascend/pytorch"),
        "double_cast_2_1": quote(ap_repo, "v2.1.0", "torch_npu/csrc/aten/common/ToKernelNpu.cpp",
                                 "Device do not support double dtype now", "Ascend/pytorch"),
        "warning_rank": quote(ap_repo, "master", "torch_npu/csrc/core/npu/register/OptionsManager.cpp",
                              "return rank_id == 0 || rank_id == -1;", "Ascend/pytorch"),
        "warning_handler": quote(ap_repo, "master", "torch_npu/csrc/core/npu/NPUException.cpp",
                                 "getBaseHandler_()->process(warning);", "Ascend/pytorch"),
        "error_code": quote(ap_repo, "master", "torch_npu/csrc/core/npu/NPUException.cpp",
                            "oss << \"ERR\" << std::setw(2)", "Ascend/pytorch"),
    }}
    for minor in TORCH_MINORS:
        src = minor if minor in wheels else NEAREST[minor]
        s = wheels[src]["strings"]
        double = [t for t in s if "Device do not support double dtype now, dtype cast" in t]
        messages["versions"][minor] = {
            "from_wheel": wheels[src]["wheel"],
            "double_cast_warning": double[0],
            # 2.1-2.5 register to.dtype and cast there; later versions cast in _to_copy
            "double_cast_op": "to.dtype" if "to.dtype" in per_version[minor] else "_to_copy",
            "warning_disable_env": sorted(e for e in ("TORCH_NPU_WARNING_DISABLE", "TORCH_NPU_DISABLED_WARNING")
                                          if e in s),
            "fallback_cpu_disable_env": "TORCH_NPU_FALLBACK_CPU_DISABLE" in s,
        }
    (HERE / "messages.json").write_text(json.dumps(messages, indent=1, sort_keys=True) + "\n")
    print(f"supported_ops.txt: {len(ops)} overloads; aclnn.json: {len(kernels)} kernels; messages.json")


if __name__ == "__main__":
    main()
