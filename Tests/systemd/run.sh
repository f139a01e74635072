#!/usr/bin/env bash
# Boots a real systemd as PID 1 in a container (systemd-nspawn) with no Swift toolchain, installs
# rpcd exactly as README's "Install as a service" block says, and drives the shipped units:
# socket activation, READY=1, STATUS=, restart keeps data, clean stop, torn-tail warning in the
# journal, a bad config fails with status 2 and no restart, the watchdog restarts a stopped daemon,
# the socket's IPAddressDeny= drops a non-loopback peer (a dummy interface in the container), the
# auth file reaches the service as a credential (README's commands), a TLS socket from rpcd.socket
# served and its certificate rotated by SIGHUP (README's commands), and `systemd-analyze security`
# in the live system.
#
# Root only (prints why it skips otherwise). Needs debootstrap and systemd-container (installed
# here when missing). The Debian root is cached under /var/tmp/rpcd-systemd; each run boots a
# throwaway overlay on top and removes it, its mounts, its cgroups and the processes it started.
#
#   Tests/systemd/run.sh            build and gather the files as README says, then test
#   RPCD_BINARY=path Tests/systemd/run.sh   test a binary built already
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$(pwd)

if [ "$(id -u)" != 0 ]; then
    echo "systemd test: skipped: it boots a container with systemd-nspawn, which needs root (run it as root, as CI does)"
    exit 0
fi

say() { echo "systemd test: $*"; }
failures=0
check() {  # check DESCRIPTION COMMAND...: runs COMMAND, records a failure if it fails
    local what=$1
    shift
    if "$@"; then say "ok: $what"; else say "FAILED: $what"; failures=$((failures + 1)); fi
}

need=()
command -v debootstrap >/dev/null || need+=(debootstrap)
command -v systemd-nspawn >/dev/null || need+=(systemd-container)
command -v nsenter >/dev/null || need+=(util-linux)
command -v openssl >/dev/null || need+=(openssl)
if [ ${#need[@]} -gt 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

# The binary: the Swift runtime linked in, so it runs where no toolchain is installed.
if [ -z "${RPCD_BINARY:-}" ]; then
    # README's build block, verbatim: it builds and gathers the files in .build/rpcd-install.
    build=$(sed -n '/<!-- install-build -->/,/^```$/p' README.md | sed '1,2d;$d')
    [ -n "$build" ] || { say "README has no <!-- install-build --> block"; exit 1; }
    say "building as README says:"
    echo "$build" | sed 's/^/    /'
    while IFS= read -r line; do
        eval "$line" </dev/null >/dev/null || { say "FAILED: $line"; exit 1; }
    done <<<"$build"
    RPCD_BINARY=.build/rpcd-install/rpcd
fi
if ldd "$RPCD_BINARY" | grep -q 'libswift\|libFoundation\|libdispatch\|not found'; then
    say "FAILED: $RPCD_BINARY loads Swift runtime libraries:"
    ldd "$RPCD_BINARY"
    exit 1
fi
say "ok: ldd $RPCD_BINARY shows system libraries only"

# The install commands, verbatim from README (run inside the container, as root: sudo dropped).
install_block=$(sed -n '/<!-- install -->/,/^```$/p' README.md | sed '1,2d;$d' | sed 's/^sudo //')
[ -n "$install_block" ] || { say "README has no <!-- install --> block"; exit 1; }

# A cached Debian root with systemd (no Swift), built once.
packages=systemd,systemd-sysv,dbus,netcat-openbsd
cache=/var/tmp/rpcd-systemd
base=$cache/bookworm-$(echo "$packages" | md5sum | cut -c1-8)
if [ ! -x "$base/lib/systemd/systemd" ]; then
    say "creating the Debian root in $base (once; about a minute)"
    mkdir -p "$cache"
    rm -rf "$base.tmp"
    for try in 1 2 3; do  # a mirror's hiccup is retried; a third failure is reported
        rm -rf "$base.tmp"
        debootstrap --variant=minbase --include="$packages" bookworm "$base.tmp" >"$cache/debootstrap.log" 2>&1 && break
        [ "$try" -lt 3 ] || { say "FAILED: debootstrap, three times; the end of $cache/debootstrap.log:"; tail -n 20 "$cache/debootstrap.log"; exit 1; }
        say "debootstrap failed (try $try of 3); trying again in 10 s"
        sleep 10
    done
    mv "$base.tmp" "$base"
fi

run=$(mktemp -d "$cache/run.XXXXXX")
name=rpcdtest$$
cgroups=(/sys/fs/cgroup/unified/$name /sys/fs/cgroup/systemd/$name)
nspawn_pid=
teardown() {
    set +e
    if [ -n "$nspawn_pid" ] && kill -0 "$nspawn_pid" 2>/dev/null; then
        kill -TERM "$nspawn_pid"  # nspawn asks the container's systemd to power off
        for _ in $(seq 1 100); do kill -0 "$nspawn_pid" 2>/dev/null || break; sleep 0.2; done
    fi
    # Whatever is left of what this run started lives in its own cgroups: kill exactly that.
    for group in "${cgroups[@]}"; do
        [ -d "$group" ] || continue
        find "$group" -name cgroup.procs -exec cat {} + 2>/dev/null | xargs -r kill -KILL 2>/dev/null
    done
    sleep 0.5
    mountpoint -q "$run/root" && { umount "$run/root" || umount -l "$run/root"; }
    for group in "${cgroups[@]}"; do [ -d "$group" ] && find "$group" -depth -type d -exec rmdir {} + 2>/dev/null; done
    rm -rf "$run"
}
trap teardown EXIT

mkdir -p "$run/upper" "$run/work" "$run/root"
mount -t overlay overlay -o "lowerdir=$base,upperdir=$run/upper,workdir=$run/work" "$run/root"

# What README's build block gathers, as a person would have it after copying it to the server.
mkdir -p "$run/root/root/rpcd-install/config" "$run/root/root/rpcd-install/systemd"
cp "$RPCD_BINARY" "$run/root/root/rpcd-install/rpcd"
cp config/rpcd.conf "$run/root/root/rpcd-install/config/"
cp systemd/rpcd.service systemd/rpcd.socket "$run/root/root/rpcd-install/systemd/"
cp README.md "$run/root/root/rpcd-install/"

# The host has no systemd to register a scope with (--keep-unit), so nspawn gets cgroups of its
# own; --system-call-filter=bpf, or systemd ignores IPAddressDeny= silently.
for group in "${cgroups[@]}"; do mkdir -p "$group"; done
(
    for group in "${cgroups[@]}"; do echo "$BASHPID" >"$group/cgroup.procs"; done
    exec systemd-nspawn -q -b -D "$run/root" -M "$name" --register=no --keep-unit --private-network \
        --system-call-filter=bpf </dev/null >"$run/console.log" 2>&1
) &
nspawn_pid=$!

leader=
for _ in $(seq 1 150); do
    leader=$(ps -o pid= --ppid "$nspawn_pid" 2>/dev/null | head -n 1 | tr -d ' ' || true)
    [ -n "$leader" ] && break
    sleep 0.2
done
[ -n "$leader" ] || { say "the container did not start"; cat "$run/console.log"; exit 1; }
inside() {  # inside 'COMMANDS': runs them in the container as root
    nsenter -t "$leader" -a -- env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
        bash -c "$1"
}
state=
for _ in $(seq 1 600); do
    state=$(inside 'systemctl is-system-running' 2>/dev/null || true)
    case "$state" in running | degraded) break ;; esac
    sleep 0.2
done
case "$state" in
running | degraded) say "container booted ($state)" ;;
*)
    say "FAILED: the container's systemd did not finish booting in 120 s (is-system-running: ${state:-no answer})"
    tail -n 40 "$run/console.log"
    exit 1
    ;;
esac
inside '! command -v swift' >/dev/null || { say "the container has a Swift toolchain; it must not"; exit 1; }

say "installing as README says:"
echo "$install_block" | sed 's/^/    /'
inside "cd /root/rpcd-install && set -e && $install_block" >"$run/install.log" 2>&1 || { cat "$run/install.log"; say "FAILED: the install commands"; exit 1; }

ping_line='{"id":"1","method":"system.ping"}'
ask() { inside "printf '%s\n' '$1' | nc -N -w 5 127.0.0.1 7878"; }
active() { inside "systemctl is-active $1" 2>/dev/null || true; }
prop() { inside "systemctl show -P $2 $1"; }
wait_for() {  # wait_for SECONDS COMMAND...: polls until COMMAND succeeds
    local seconds=$1
    shift
    for _ in $(seq 1 $((seconds * 5))); do "$@" && return 0; sleep 0.2; done
    "$@"
}

pings() { ask "$ping_line" | grep -q system.pingResult; }
status_line() { inside 'systemctl status rpcd.service --no-pager' | grep -q 'Status: "serving'; }
has_u1() { ask '{"id":"g","method":"user.getUser","param":{"userId":"u1"}}' | grep -q getUserResult; }
no_sigkill() { ! inside 'journalctl -u rpcd.service --no-pager' | grep -qi 'sigkill\|killing process'; }
torn_warning() { inside 'journalctl -p warning -u rpcd.service --no-pager' | grep -q 'incomplete last record'; }
watchdog_logged() { inside 'journalctl -u rpcd.service --no-pager' | grep -qi 'watchdog timeout'; }

check "rpcd.socket is listening" test "$(active rpcd.socket)" = active
check "rpcd.service is inactive until the first connection" test "$(active rpcd.service)" = inactive
check "system.ping over 127.0.0.1:7878 inside the container" pings
check "README's smoke test: rpcd call 127.0.0.1:7878 system.ping" inside 'rpcd call 127.0.0.1:7878 system.ping | grep -q system.pingResult'
running() { test "$(prop rpcd.service ActiveState)/$(prop rpcd.service SubState)" = active/running; }
check "the service is active (running) after READY=1" wait_for 5 running
check "systemctl status shows the STATUS= line" wait_for 5 status_line
check "with nothing in the credential store, the service runs without the auth credential" \
    inside 'test ! -e /run/credentials/rpcd.service/auth'

ask '{"id":"c","method":"user.createUser","param":{"id":"u1","name":"Ada","email":"ada@example.com"}}' >/dev/null
inside 'systemctl restart rpcd.service'
check "a created user survives systemctl restart" has_u1

# A second record, so the torn tail below costs u2 and leaves u1.
ask '{"id":"c2","method":"user.createUser","param":{"id":"u2","name":"Bob","email":"bob@example.com"}}' >/dev/null
inside 'systemctl stop rpcd.service'
check "systemctl stop ends the daemon cleanly (exit 0)" \
    test "$(prop rpcd.service Result)/$(prop rpcd.service ExecMainCode)/$(prop rpcd.service ExecMainStatus)" = success/1/0
check "... with no SIGKILL" no_sigkill

inside 'truncate -s -3 /var/lib/private/rpcd/journal.jsonl'
ask "$ping_line" >/dev/null
check "journalctl -p warning shows the torn-tail warning after truncating the journal" wait_for 5 torn_warning

# README's way to run the tools on the service's data: stopped, as the unit's dynamic user.
repair_block=$(sed -n '/^sudo systemctl stop rpcd.socket rpcd.service$/,/^sudo systemctl start rpcd.socket$/p' README.md | sed 's/^sudo //')
repairs() { inside "set -e; $repair_block" >/dev/null; }
check "README's repair commands run on the service's data" repairs
check "... and the data is still served afterwards" has_u1
check "the unit's Documentation= file is installed" inside "test -f $(sed -n 's/^Documentation=file://p' systemd/rpcd.service)"

inside 'cp /etc/rpcd/rpcd.conf /etc/rpcd/rpcd.conf.good && echo "bogus_key = 1" >> /etc/rpcd/rpcd.conf'
inside 'systemctl restart rpcd.service' >/dev/null 2>&1 || true
failed_with_2() { test "$(prop rpcd.service ActiveState)/$(prop rpcd.service ExecMainStatus)" = failed/2; }
check "a bad config key fails the unit with status 2" wait_for 10 failed_with_2
sleep 1  # a restart, were there one, would show by now
check "... and it is not restarted" test "$(prop rpcd.service NRestarts)" = 0
inside 'mv /etc/rpcd/rpcd.conf.good /etc/rpcd/rpcd.conf && systemctl reset-failed rpcd.service'

inside 'mkdir -p /etc/systemd/system/rpcd.service.d && printf "[Service]\nWatchdogSec=2s\n" > /etc/systemd/system/rpcd.service.d/watchdog.conf && systemctl daemon-reload && systemctl start rpcd.service'
first=$(prop rpcd.service MainPID)
inside "kill -STOP $first"
restarted() { local now; now=$(prop rpcd.service MainPID); [ "$now" != "$first" ] && [ "$now" != 0 ] && [ "$(active rpcd.service)" = active ]; }
check "the watchdog kills and restarts a SIGSTOPped daemon" wait_for 20 restarted
check "... and says so in the journal" wait_for 10 watchdog_logged
inside 'rm -r /etc/systemd/system/rpcd.service.d && systemctl daemon-reload'

# IPAddressDeny= in rpcd.socket: a peer on a non-loopback address (10.99.0.1, added to the
# container's lo with the host's ip, as no dummy or veth module may be at hand) cannot even connect,
# since the socket unit's filter drops its packets; widened, rpcd itself refuses it (protected mode).
nsenter -t "$leader" -n -- ip addr add 10.99.0.1/32 dev lo
listen_any() {  # listen_any [EXTRA-SOCKET-LINE]: rpcd.socket on every address
    inside "mkdir -p /etc/systemd/system/rpcd.socket.d && printf '[Socket]\nListenStream=\nListenStream=0.0.0.0:7878\n$1\n' > /etc/systemd/system/rpcd.socket.d/any.conf && systemctl daemon-reload && systemctl stop rpcd.service && systemctl restart rpcd.socket"
}
from_outside() { inside "printf '%s\n' '$ping_line' | nc -v -N -w 3 -s 10.99.0.1 10.99.0.1 7878 2>&1" || true; }
listen_any ''
outside_dropped() { local out; out=$(from_outside); [[ $out == *"timed out"* && $out != *succeeded* ]] || { echo "$out"; false; }; }
check "the socket's IPAddressDeny= drops a peer on a non-loopback address (its connect times out)" outside_dropped
check "... while a loopback peer is served on the same socket" pings
listen_any 'IPAddressAllow=10.99.0.0/24'
outside_refused() { from_outside | grep -q '"code":"unauthorized"'; }
check "... and with IPAddressAllow= widened, protected mode answers it with unauthorized" outside_refused
inside 'rm -r /etc/systemd/system/rpcd.socket.d && systemctl daemon-reload && systemctl stop rpcd.service && systemctl restart rpcd.socket'

# The auth file as a systemd credential, with README's commands verbatim (sudo dropped).
credential_block=$(sed -n '/<!-- auth-credential -->/,/^```$/p' README.md | sed '1,2d;$d' | sed 's/^sudo //')
[ -n "$credential_block" ] || { say "README has no <!-- auth-credential --> block"; exit 1; }
inside "cd /root && set -e && $credential_block" >"$run/credential.log" 2>&1 || { cat "$run/credential.log"; say "FAILED: README's credential commands"; failures=$((failures + 1)); }
pings >/dev/null || true  # starts the service if the restart left it waiting for a connection
check "README's credential commands: the service sees /etc/rpcd/auth as \$CREDENTIALS_DIRECTORY/auth" \
    inside 'cmp /etc/rpcd/auth /run/credentials/rpcd.service/auth && grep -qx "CREDENTIALS_DIRECTORY=/run/credentials/rpcd.service" <(tr "\0" "\n" < /proc/$(systemctl show -P MainPID rpcd.service)/environ)'
check "... readable by the service's dynamic user alone (mode 0400), while /etc/rpcd/auth stays root's 0600" \
    inside 'test "$(stat -c %u:%a /run/credentials/rpcd.service/auth)" = "$(stat -c %u /proc/$(systemctl show -P MainPID rpcd.service)):400" && test "$(stat -c %U:%a /etc/rpcd/auth)" = root:600'
check "... and app.token holds the token whose SHA-256 is app's line" \
    inside 'grep -qx "app write $(tr -d "\n" < /root/app.token | sha256sum | cut -c1-64)" /etc/rpcd/auth'

# TLS under systemd, with README's commands verbatim (sudo dropped): rpcd.socket binds a second
# socket, listen = tls:… marks it, the key arrives as a credential; then SIGHUP rotates the certificate.
tls_block=$(sed -n '/<!-- tls-systemd -->/,/^```$/p' README.md | sed '1,2d;$d' | sed 's/^sudo //')
[ -n "$tls_block" ] || { say "README has no <!-- tls-systemd --> block"; exit 1; }
tls_dir="$run/root/root/tls-setup"
mkdir -p "$tls_dir"
(
    cd "$tls_dir"
    curve=(-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes)
    openssl req -x509 "${curve[@]}" -keyout ca.key -out ca.pem -days 2 -subj "/CN=rpcd test CA" 2>/dev/null
    openssl req -x509 "${curve[@]}" -keyout ca2.key -out ca2.pem -days 2 -subj "/CN=rpcd test CA 2" 2>/dev/null
    openssl req -new "${curve[@]}" -keyout server.key -out server.csr -subj "/CN=localhost" 2>/dev/null
    printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\n' > server.ext
    openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 -extfile server.ext -out server.pem 2>/dev/null
    # The same key certified by another CA: what SIGHUP rotates to.
    openssl x509 -req -in server.csr -CA ca2.pem -CAkey ca2.key -CAcreateserial -days 2 -extfile server.ext -out server2.pem 2>/dev/null
    chmod 600 server.key ca.key ca2.key
)
inside 'cp /etc/rpcd/rpcd.conf /etc/rpcd/rpcd.conf.plain'
tls_ping() { inside "rpcd call --ca /root/tls-setup/$1 tls:127.0.0.1:7879 system.ping 2>&1"; }
if inside "cd /root/tls-setup && set -e && $tls_block" >"$run/tls.log" 2>&1; then
    check "README's TLS-under-systemd commands: a tls: socket from rpcd.socket serves TLS" grep -q system.pingResult "$run/tls.log"
else
    cat "$run/tls.log"
    say "FAILED: README's TLS-under-systemd commands"
    failures=$((failures + 1))
fi
check "... the key reached the service as a credential (0400, the dynamic user's)" \
    inside 'test "$(stat -c %a /run/credentials/rpcd.service/tls-key)" = 400'
check "... and the plain socket beside it still serves" pings
inside 'cp /root/tls-setup/server2.pem /etc/rpcd/tls/server.pem && kill -HUP "$(systemctl show -P MainPID rpcd.service)"'
rotated() { tls_ping ca2.pem | grep -q system.pingResult; }
check "SIGHUP rotates the certificate: new connections verify against the new CA" wait_for 5 rotated
old_ca_refused() { ! tls_ping ca.pem | grep -q system.pingResult; }
check "... and no longer against the old one" old_ca_refused
reload_logged() { inside 'journalctl -u rpcd.service --no-pager' | grep -q 'TLS certificate and key: reloaded'; }
check "... and the journal says so" wait_for 5 reload_logged
inside 'mv /etc/rpcd/rpcd.conf.plain /etc/rpcd/rpcd.conf && rm -r /etc/systemd/system/rpcd.socket.d /etc/systemd/system/rpcd.service.d && systemctl daemon-reload && systemctl stop rpcd.service && systemctl restart rpcd.socket'

exposure=$(inside 'systemd-analyze security rpcd.service --no-pager' | sed -n 's/.*Overall exposure level for rpcd.service: \([0-9.]*\).*/\1/p')
check "systemd-analyze security rpcd.service in the live system is ${exposure:-unknown} (at most 1.5)" \
    awk -v e="${exposure:-99}" 'BEGIN { exit !(e <= 1.5) }'

if [ "$failures" -gt 0 ]; then
    say "$failures check(s) failed; rpcd's journal in the container:"
    inside 'journalctl -u rpcd.service -u rpcd.socket --no-pager | tail -n 40'
    exit 1
fi
say "all checks passed"
