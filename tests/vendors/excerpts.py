"""Regenerate a vendor backend's source excerpts from a checkout (never run by the tests, never downloads).

    git clone https://github.com/Ascend/pytorch /tmp/ascend-pytorch
    python tests/vendors/excerpts.py hccl_excerpts.txt /tmp/ascend-pytorch [COMMIT]
    git clone https://github.com/sunnygui-L/torch-gcu /tmp/torch-gcu
    python tests/vendors/excerpts.py eccl_excerpts.txt /tmp/torch-gcu [COMMIT]

Each block of the file is headed "== <file>:<first line>-<last line>"; this rewrites every block's lines from
`git show COMMIT:<file>` (default: the commit named in the file's header), keeping the header and the block list.
After moving to another commit, check that each block still starts and ends where it should (line numbers move).
hccl_excerpts.txt's header names torch_npu wheels whose strings hold the same literals: `pip download --no-deps
torch_npu==X`, then `unzip -p torch_npu-X*.whl torch_npu/lib/libtorch_npu.so | strings | grep -E 'Unsupported
data type|does not support (recv|gather)|not supported in alltoall|Cannot use ReduceOp'`.
"""

import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
BLOCK = re.compile(r"^== (?P<file>\S+):(?P<first>\d+)-(?P<last>\d+)$")


def main(name: str, checkout: str, commit: str = "") -> None:
    path = os.path.join(HERE, os.path.basename(name))
    text = open(path).read()
    header, _, _ = text.partition("\n== ")
    commit = commit or re.search(r"commit\W+([0-9a-f]{40})", header).group(1)
    blocks = [m.groupdict() for m in map(BLOCK.match, text.splitlines()) if m]
    out = [header.rstrip("\n").replace(re.search(r"[0-9a-f]{40}", header).group(0), commit), ""]
    for block in blocks:
        lines = subprocess.run(["git", "-C", checkout, "show", f"{commit}:{block['file']}"], check=True,
                               capture_output=True, text=True).stdout.splitlines()
        out.append(f"== {block['file']}:{block['first']}-{block['last']}")
        out.extend(lines[int(block["first"]) - 1:int(block["last"])])
        out.append("")
    with open(path, "w") as fh:
        fh.write("\n".join(out))


if __name__ == "__main__":
    main(*sys.argv[1:])
