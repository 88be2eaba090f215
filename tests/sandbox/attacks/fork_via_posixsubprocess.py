# Starts a process through the C helper behind subprocess, skipping subprocess's own audit event.
# expect: forbidden
# expect-without-audit: error
# absent-after: /tmp/flawforge-attack-posixsubprocess
import os

import _posixsubprocess


def solve():
    errpipe_read, errpipe_write = os.pipe()
    return _posixsubprocess.fork_exec(
        [b"/bin/sh", b"-c", b"touch /tmp/flawforge-attack-posixsubprocess"], [b"/bin/sh"], True, (errpipe_write,),
        None, None, -1, -1, -1, -1, -1, -1, errpipe_read, errpipe_write, False, False, -1, None, None, None, -1,
        None, True)
