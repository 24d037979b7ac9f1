"""The lab across a fleet: targets (profile x variant x partition/constraint) as a Slurm job array or a
Kubernetes Indexed Job, one run per target in a shared results folder, one report comparing them.

- `plan`: the targets and the plan file (RESULTS/fleet.json) every task reads;
- `slurm`: the sbatch scripts (one array per partition/constraint), submitting, waiting;
- `k8s`: the Indexed Job manifest for clusters without Slurm;
- `task`: what one array task does (run its target, record its status);
- `finish`: after the array, which runs landed, and the report over all of them;
- `scheduler`: the scheduler's ids as the manifest records them.

Standard library only: it runs with the host's python3 on login and compute nodes (docs/fleet.md).
"""
