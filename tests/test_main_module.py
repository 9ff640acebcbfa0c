"""`python -m transfer`: runs a script as transfer-run does, and is the `transfer` command for its tools."""

from conftest import clean_env, python


def test_python_m_transfer_answers_the_transfer_commands_tools(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("import torch\nx = torch.zeros(2).cuda()\n")
    version = python("-m", "transfer", "--version", env=clean_env(), check=False)
    assert version.returncode == 0 and "(cuda-transfer)" in version.stdout, version.stdout + version.stderr
    scan = python("-m", "transfer", "scan", "--device", "npu", str(script), env=clean_env(), check=False)
    assert scan.returncode == 0 and "npu: 1 translated" in scan.stdout, scan.stdout + scan.stderr
    usage = python("-m", "transfer", "--help", env=clean_env(), check=False)
    assert "is the `transfer` command" in usage.stdout, usage.stdout
