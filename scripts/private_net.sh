#!/bin/sh
# Run a command in a private network namespace with only the loopback interface up, so that
# nothing it starts (the ROS tests' DDS participants) can reach or be reached from another host.
# Needs unshare and ip (util-linux, iproute2) and root or unprivileged user namespaces; where the
# machine allows none, the command runs on the host network (DDS stays on loopback by profile).
#     scripts/private_net.sh python -m pytest -q test
if command -v unshare >/dev/null 2>&1 && command -v ip >/dev/null 2>&1; then
    for flags in -n -rn; do
        if unshare $flags ip link set lo up 2>/dev/null; then
            exec unshare $flags sh -c 'ip link set lo up && exec "$@"' private_net "$@"
        fi
    done
fi
echo "private_net.sh: no private network namespace here (needs root or user namespaces," \
    "unshare and ip); running on the host network" >&2
exec "$@"
