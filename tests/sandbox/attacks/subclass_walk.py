# Reaches os.system without importing os, through object's subclasses.
# expect: forbidden
# expect-without-audit: ok
# absent-after: /tmp/flawforge-attack-subclass
def solve():
    for cls in ().__class__.__bases__[0].__subclasses__():
        if cls.__name__ == "_wrap_close":
            return cls.__init__.__globals__["system"]("touch /tmp/flawforge-attack-subclass")
