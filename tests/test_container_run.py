"""lab/containers/run.py: the docker run command of a variant."""

from __future__ import annotations

from lab.containers.run import run_command
from lab.containers.variants import VARIANTS


def test_a_container_run_sees_the_scheduler_ids_and_the_hosts_name(tmp_path):
    cmd = run_command(VARIANTS["cpu"], ["run"], tmp_path, image_ref="sha256:x", host_uid=0, host_gid=0,
                      environ={"SLURM_JOB_ID": "9", "SLURMD_NODENAME": "n2", "UNRELATED": "x"})
    assert "SLURM_JOB_ID=9" in cmd and "SLURMD_NODENAME=n2" in cmd and not any("UNRELATED" in c for c in cmd)
    assert cmd[cmd.index("--hostname") + 1]
