"""Off-host copies through restic: the keeper drives it as a subprocess, it reimplements nothing."""
