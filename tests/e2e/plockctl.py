#!/usr/bin/env python3
# plockctl.py - a lock-holding process for the lock tests (t_cluster_plock.sh),
# driven line by line on stdin; every command answers one line on stdout:
#
#   open NAME PATH          open PATH read-write as fd NAME          -> OK
#   close NAME              close fd NAME                            -> OK
#   lk NAME CMD TYPE START LEN
#                           fcntl(NAME, CMD, struct flock): CMD is setlk,
#                           setlkw, getlk, ofd_setlk, ofd_setlkw, ofd_getlk;
#                           TYPE rd, wr or un               -> OK, or the errno
#                           name; getlk: "un" or "TYPE START LEN PID"
#   bg NAME CMD TYPE START LEN
#                           the same in a thread: answers "started" at once,
#                           and later, when the call returns, "done RESULT"
#   flock NAME sh|ex|un [nb]                                         -> OK / errno
#   intr NAME TYPE START LEN
#                           F_SETLKW through libc with SIGALRM 0.5 s later
#                           (a handler without SA_RESTART): EINTR expected
#   pid                     -> the process id
#   exit                    exit at once (the kernel drops the locks)
import ctypes
import errno
import fcntl
import os
import signal
import struct
import sys
import threading

F_OFD_GETLK, F_OFD_SETLK, F_OFD_SETLKW = 36, 37, 38
CMDS = {"setlk": fcntl.F_SETLK, "setlkw": fcntl.F_SETLKW, "getlk": fcntl.F_GETLK,
        "ofd_setlk": F_OFD_SETLK, "ofd_setlkw": F_OFD_SETLKW, "ofd_getlk": F_OFD_GETLK}
TYPES = {"rd": fcntl.F_RDLCK, "wr": fcntl.F_WRLCK, "un": fcntl.F_UNLCK}
NAMES = {v: k for k, v in TYPES.items()}
FLOCK = "hhqqi"  # l_type, l_whence, l_start, l_len, l_pid (x86-64 layout)

fds = {}
out_lock = threading.Lock()


def say(s):
    with out_lock:
        sys.stdout.write(s + "\n")
        sys.stdout.flush()


def ename(e):
    return "EDEADLK" if e.errno == errno.EDEADLK else errno.errorcode.get(e.errno, str(e.errno))


def do_lk(name, cmd, typ, start, length):
    arg = struct.pack(FLOCK, TYPES[typ], os.SEEK_SET, int(start), int(length), 0)
    try:
        res = fcntl.fcntl(fds[name], CMDS[cmd], arg)
    except OSError as e:
        return ename(e)
    if cmd.endswith("getlk"):
        t, _, s, ln, pid = struct.unpack(FLOCK, res)
        return "un" if t == fcntl.F_UNLCK else "%s %d %d %d" % (NAMES[t], s, ln, pid)
    return "OK"


def do_intr(name, typ, start, length):
    libc = ctypes.CDLL(None, use_errno=True)
    fired = []
    old = signal.signal(signal.SIGALRM, lambda *_: fired.append(1))
    buf = ctypes.create_string_buffer(struct.pack(FLOCK, TYPES[typ], 0, int(start), int(length), 0))
    signal.setitimer(signal.ITIMER_REAL, 0.5)
    rc = libc.fcntl(fds[name], fcntl.F_SETLKW, buf)
    err = ctypes.get_errno()
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.signal(signal.SIGALRM, old)
    if rc == 0:
        return "OK"
    return errno.errorcode.get(err, str(err))


for line in sys.stdin:
    w = line.split()
    if not w:
        continue
    try:
        if w[0] == "open":
            fds[w[1]] = os.open(w[2], os.O_RDWR | os.O_CREAT, 0o644)
            say("OK")
        elif w[0] == "close":
            os.close(fds.pop(w[1]))
            say("OK")
        elif w[0] == "lk":
            say(do_lk(*w[1:6]))
        elif w[0] == "bg":
            args = w[1:6]
            threading.Thread(target=lambda: say("done " + do_lk(*args)), daemon=True).start()
            say("started")
        elif w[0] == "flock":
            op = {"sh": fcntl.LOCK_SH, "ex": fcntl.LOCK_EX, "un": fcntl.LOCK_UN}[w[2]]
            if len(w) > 3 and w[3] == "nb":
                op |= fcntl.LOCK_NB
            try:
                fcntl.flock(fds[w[1]], op)
                say("OK")
            except OSError as e:
                say(ename(e))
        elif w[0] == "intr":
            say(do_intr(*w[1:5]))
        elif w[0] == "pid":
            say(str(os.getpid()))
        elif w[0] == "exit":
            os._exit(0)
        else:
            say("bad command " + w[0])
    except OSError as e:
        say(ename(e))
