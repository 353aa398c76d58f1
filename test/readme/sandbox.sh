#!/usr/bin/env bash
# The README walkthrough's node: run by readme_test.go as
#   nsenter --net=/run/netns/NS unshare --mount --propagation private bash sandbox.sh
# so its mounts and its network are its own (not `ip netns exec`, whose sysfs hides the cgroup mounts
# runc needs: this script mounts the network namespace's sysfs and keeps them). /etc, /usr/local/bin, /opt and /srv are overlays whose
# writes go to a tmpfs, /run and /var/lib are empty tmpfs, so the README's commands touch nothing of
# the host. /usr/local/bin gets stand-ins for sudo (runs its arguments: the test runs as root) and
# systemctl (`restart containerd`: writes `containerd config default` to /etc/containerd/config.toml
# when there is none and starts containerd with it).
#
# Environment (set by the test): WORK (the test's directory: cmd/N.sh are the README's commands, in
# order; each one's output goes to out/N.log and a failure writes `N EXIT` to failed), REPO (the
# repository root, the commands' working directory), PEERS (the pinned peers' bin), CNI (the CNI
# plugins), PREPARE (a script run before the README's commands, with the sandbox in place).
set -u
: "${WORK:?}" "${REPO:?}" "${PEERS:?}" "${CNI:?}" "${PREPARE:?}"

ip link set lo up

# overlay DIR: DIR as it is, with writes going to the tmpfs at $WORK/tmpfs.
mount -t tmpfs tmpfs "$WORK/tmpfs"
mkdir "$WORK/tmpfs/cgroup"
mount --rbind /sys/fs/cgroup "$WORK/tmpfs/cgroup"
mount -t sysfs sysfs /sys
mount --move "$WORK/tmpfs/cgroup" /sys/fs/cgroup
overlay() {
	local d="$WORK/tmpfs/${1//\//_}"
	mkdir -p "$d/upper" "$d/work"
	mount -t overlay overlay -o "lowerdir=$1,upperdir=$d/upper,workdir=$d/work" "$1"
}
overlay /etc
overlay /usr/local/bin
overlay /opt
overlay /srv
mount -t tmpfs tmpfs /run
mount -t tmpfs tmpfs /var/lib

cat >/usr/local/bin/sudo <<'EOF'
#!/bin/sh
# sudo's stand-in in the README test's sandbox, which runs as root.
exec "$@"
EOF
cat >/usr/local/bin/systemctl <<EOF
#!/usr/bin/env bash
# systemctl's stand-in in the README test's sandbox: \`restart containerd\` only.
set -eu
[[ "\$*" == "restart containerd" ]] || { echo "systemctl stand-in: only 'restart containerd', not '\$*'" >&2; exit 1; }
if [[ ! -e /etc/containerd/config.toml ]]; then
	mkdir -p /etc/containerd
	containerd config default >/etc/containerd/config.toml
fi
if [[ -e /run/containerd.pid ]]; then
	pid=\$(cat /run/containerd.pid)
	kill "\$pid" 2>/dev/null || true
	while kill -0 "\$pid" 2>/dev/null; do sleep 0.1; done
fi
setsid containerd --config /etc/containerd/config.toml >>"$WORK/containerd.log" 2>&1 </dev/null &
echo \$! >/run/containerd.pid
for _ in \$(seq 600); do
	if [[ -S /run/containerd/containerd.sock ]] && ctr version >/dev/null 2>&1; then exit 0; fi
	kill -0 \$! 2>/dev/null || { echo "containerd exited (see $WORK/containerd.log)" >&2; exit 1; }
	sleep 0.1
done
echo "containerd did not answer on /run/containerd/containerd.sock within 60s" >&2
exit 1
EOF
chmod 755 /usr/local/bin/sudo /usr/local/bin/systemctl
export PATH="/usr/local/bin:$PEERS:/usr/local/go/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin"

# nerdctl's default CNI plugin directory.
mkdir -p /opt/cni/bin
mount --bind "$CNI" /opt/cni/bin

# teardown: remove the containers, then stop everything else in this network namespace (the
# README's weightsnapd, containerd, its shims); the mounts go with the mount namespace.
teardown() {
	if [[ -S /run/containerd/containerd.sock ]]; then
		ids=$(timeout 30 nerdctl ps -aq 2>/dev/null)
		if [[ -n $ids ]]; then
			# shellcheck disable=SC2086 # one argument per id
			timeout 60 nerdctl rm -f $ids >/dev/null 2>&1
		fi
	fi
	local net
	net=$(readlink /proc/$$/ns/net)
	others() {
		local p
		for p in /proc/[0-9]*; do
			[[ ${p#/proc/} == "$$" || ${p#/proc/} == "$BASHPID" ]] && continue
			[[ $(readlink "$p/ns/net" 2>/dev/null) == "$net" ]] && echo "${p#/proc/}"
		done
	}
	local sig
	for sig in TERM KILL; do
		# shellcheck disable=SC2046 # one argument per pid
		kill -s "$sig" $(others) 2>/dev/null
		for _ in $(seq 100); do
			[[ -z $(others) ]] && break
			sleep 0.1
		done
	done
}
trap teardown EXIT

cd "$REPO" || exit 1
bash -eu "$PREPARE" >"$WORK/prepare.log" 2>&1 || { echo "prepare $?" >"$WORK/failed"; exit 1; }

mkdir -p "$WORK/out"
for f in $(cd "$WORK/cmd" && ls | sort -n); do
	n=${f%.sh}
	# shellcheck disable=SC1090 # the README's command, in this shell (its `&` jobs are this shell's)
	source "$WORK/cmd/$f" >"$WORK/out/$n.log" 2>&1
	rc=$?
	if ((rc != 0)); then
		echo "$n $rc" >"$WORK/failed"
		exit 1
	fi
done
