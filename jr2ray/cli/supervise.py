"""`jr2ray supervise`: keep this home's instance up. It watches the head this home started (its GCS answering, its
GCS and raylet processes running, found by the head's own temp dir, never by name) and, when either is gone, stops
what is left of that head by pid and runs `jr2ray up` again: the same home, and the store and choices config.json
kept. Runs go on from their journals (`up` resumes them; overdue timers fire once), parked runs wake on their next
Gate event. A systemd unit for a home-lab head is in cluster/jr2ray-supervise.service.

With Ray's GCS fault tolerance (`up --gcs-redis`), a GCS that dies while the raylet runs is started again alone: the
same command line and environment it had (kept by `up` as it started the head, and seen while it ran), so it comes
back on the same port with its state from Redis, and the raylet, the API and every actor go on; only if that fails
is the whole instance started again.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType

from jr2ray.cli.errors import EXIT_ERROR, EXIT_OK
from jr2ray.cli.format import say
from jr2ray.cli.rayproc import GcsLaunch, gcs_launch, kept_gcs_launch, ray_pids, stop_pids
from jr2ray.instance_record import Instance, read_instance
from jr2ray.run.head import HeadState, head_state, port_open, vital_pids

# After this many `up`s in a row fail, the supervisor gives up (exit 1, for systemd's Restart= to take over).
MAX_FAILED_UPS = 5
# A head is called dead only after this many checks in a row see it so: one slow answer is not a death.
DEAD_AFTER_CHECKS = 2
# How long a GCS started again may take to answer on its port (a loaded 2-core box; Ray's raylet waits 60 s for it,
# RAY_gcs_rpc_server_reconnect_timeout_s).
GCS_RESTART_TIMEOUT_S = 30.0


class GcsKeeper:
    """Starts a dead GCS again on a head with GCS fault tolerance, and reaps the processes it started."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.seen_up = False
        self.launch: GcsLaunch | None = None
        self.children: list[subprocess.Popen[bytes]] = []

    def watch(self, inst: Instance) -> None:
        """While the head is up: remember how its GCS runs (again after each restart: a new pid). The first time,
        say the head is up: what an operator (and the tests) wait for before a fault is worth injecting."""
        self.children = [c for c in self.children if c.poll() is None]  # a child GCS that died is reaped here
        if not inst.gcs_redis or not inst.temp_dir:
            self.launch = None
        else:
            pids = vital_pids(inst.temp_dir)["gcs_server"]
            if self.launch is None or pids != [self.launch.pid]:
                self.launch = gcs_launch(inst.temp_dir, inst.ray_started_at)
        if not self.seen_up:
            self.seen_up = True
            say("supervise: the head is up" + (f"; its GCS (pid {self.launch.pid}) would be started again alone"
                                               if self.launch is not None else ""))

    def restart(self, inst: Instance) -> bool:
        """Start the GCS again if it alone is gone (the raylet runs) and its state is in Redis. True once it answers
        on its port with the same raylet still running."""
        self.children = [c for c in self.children if c.poll() is None]
        if not inst.gcs_redis or not inst.temp_dir:
            return False
        seen = self.launch if self.launch is not None and self.launch.of_head(inst) else None
        vital, launch = vital_pids(inst.temp_dir), seen or kept_gcs_launch(self.home, inst)
        why = ("no command line is known to start it with: this supervisor never saw it run, and `up` kept none "
               "for this head"
               if launch is None else f"the GCS process {vital['gcs_server']} still runs"
               if vital["gcs_server"] else "the raylet is gone too" if not vital["raylet"] else None)
        if why is not None or launch is None:  # said, so a whole-head restart that follows has its reason in the log
            say(f"supervise: the GCS is not restarted alone: {why}")
            return False
        began = time.monotonic()
        try:
            child = subprocess.Popen(launch.cmdline, env=launch.env, cwd=launch.cwd,
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, start_new_session=True)
        except OSError as exc:
            say(f"supervise: could not start the GCS again ({exc})")
            return False
        self.children.append(child)
        while time.monotonic() - began < GCS_RESTART_TIMEOUT_S:
            if child.poll() is not None:
                say(f"supervise: the GCS started again exited at once (code {child.returncode})")
                return False
            if port_open(inst.ray_address, 0.5):
                raylet = vital_pids(inst.temp_dir)["raylet"]
                if raylet != vital["raylet"]:
                    return False
                say(f"supervise: the GCS (pid {launch.pid}) was gone; started it again (pid {child.pid}) on "
                    f"{inst.ray_address} with its state from Redis at {inst.gcs_redis}, "
                    f"{time.monotonic() - began:.1f}s; the raylet (pid {raylet[0]}) and its actors were kept")
                self.launch = None  # seen afresh at the next check
                return True
            time.sleep(0.2)
        say(f"supervise: the GCS started again did not answer within {GCS_RESTART_TIMEOUT_S:.0f}s")
        child.kill()
        child.wait(5)
        return False


def _up(home: Path, timeout_s: float) -> bool:
    """`jr2ray up` as a child process (it joins and leaves Ray itself): with nothing but the home, so the kept
    config decides the store, ports, workflows and launcher."""
    cmd = [sys.executable, "-m", "jr2ray.cli", "--home", str(home), "up"]
    try:
        proc = subprocess.run(cmd, check=False, timeout=timeout_s, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True)  # one stream: its lines in the order `up` said them
    except subprocess.TimeoutExpired:
        say(f"supervise: `jr2ray up` did not finish within {timeout_s:.0f}s")
        return False
    for line in proc.stdout.splitlines():
        if "instance token" not in line and not line.startswith("  "):  # never echo a freshly shown token
            say(f"  up: {line}")
    return proc.returncode == 0


def _clear(home: Path) -> int:
    """Stop every process left of the head this home recorded (by pid, through its temp dir)."""
    inst = read_instance(home)
    if inst is None or not inst.started_ray or not inst.temp_dir:
        return 0
    left = ray_pids(inst.temp_dir)
    stop_pids(left)
    return len(left)


def _bring_back(home: Path, state: HeadState | None, head_up: bool, up_timeout: float, failed_ups: int) -> int:
    """Run `up` for a head found down, or whose last `up` failed after its head started. Returns how many `up`s in
    a row have failed now (0: the instance is up again); after a failure it waits, longer each time, first."""
    began = time.monotonic()
    if head_up:  # the new head runs, but the `up` that started it failed after (say, deploying the API)
        say("supervise: the last `jr2ray up` failed after its Ray head started; running it again on that head")
    else:
        why = state.reason if state is not None else "no instance is recorded"
        cleared = _clear(home)
        say(f"supervise: the instance is down ({why}); stopped {cleared} leftover process(es); starting it again")
    if _up(home, up_timeout):
        say(f"supervise: the instance is up again, {time.monotonic() - began:.1f}s after it was found down")
        return 0
    if failed_ups + 1 < MAX_FAILED_UPS:
        time.sleep(min(30.0, 2.0 ** (failed_ups + 1)))
    return failed_ups + 1


def cmd_supervise(args: argparse.Namespace) -> int:
    home = args.settings.home_dir()
    stopping: list[int] = []

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        stopping.append(signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    failed_ups = 0
    dead_checks = 0
    gcs = GcsKeeper(home)
    say(f"supervise: watching the instance of {home} every {args.interval:g}s")
    while not stopping:
        inst = read_instance(home)
        if inst is not None and not inst.started_ray:
            say("supervise: this home joined a Ray it did not start; there is nothing of its own to restart")
            return EXIT_ERROR
        state = head_state(inst) if inst is not None else None
        head_up = inst is not None and state is not None and state.state == "up"
        if inst is not None and head_up and not failed_ups:
            gcs.watch(inst)
            dead_checks = 0
            if args.once:
                return EXIT_OK
            time.sleep(args.interval)
            continue
        if not head_up:
            dead_checks += 1
            if inst is not None and dead_checks < DEAD_AFTER_CHECKS:
                time.sleep(min(args.interval, 0.5))
                continue
            if inst is not None and gcs.restart(inst):
                dead_checks = 0
                if args.once:
                    return EXIT_OK
                continue
        failed_ups = _bring_back(home, state, head_up, args.up_timeout, failed_ups)
        if failed_ups == 0:
            dead_checks, gcs.launch = 0, None  # a new head: its GCS is seen afresh
        elif failed_ups >= MAX_FAILED_UPS:
            say(f"supervise: {failed_ups} `jr2ray up`s failed in a row; giving up")
            return EXIT_ERROR
        if args.once:
            return EXIT_OK
    say("supervise: stopped (the instance is left as it is; `jr2ray down` stops it)")
    return EXIT_OK
