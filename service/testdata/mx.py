#!/usr/bin/python3
"""A receiving mail server's DKIM step, for patchbot's tests, with Debian's
python3-dkim: "sign KEY" signs stdin as example.org (selector s1);
"check TXT" removes the Authentication-Results fields that claim this
server's authserv-id (RFC 8601 section 5), verifies the signature against
the given DNS TXT record, and prepends this server's verdict."""
import re
import sys

import dkim

AUTHSERV = b"mx.patchbot.test"


def main():
    mode, arg = sys.argv[1], sys.argv[2]
    msg = sys.stdin.buffer.read()
    if mode == "sign":
        key = open(arg, "rb").read()
        sig = dkim.sign(msg, b"s1", b"example.org", key, include_headers=[b"from", b"to", b"subject", b"message-id"])
        sys.stdout.buffer.write(sig + msg)
        return
    txt = open(arg, "rb").read().strip()
    head, sep, body = msg.partition(b"\r\n\r\n")
    fields = re.split(rb"\r\n(?![ \t])", head)
    kept = [f for f in fields if not re.match(rb"(?i)authentication-results:\s*" + re.escape(AUTHSERV) + rb"\b", f)]
    msg = b"\r\n".join(kept) + sep + body
    d = dkim.DKIM(msg)
    try:
        ok = d.verify(dnsfunc=lambda name, timeout=5: txt if name == b"s1._domainkey.example.org." else None)
    except dkim.DKIMException:
        ok = False
    if ok:
        res = b"dkim=pass header.d=" + d.domain + b" header.i=@" + d.domain
    elif b"dkim-signature:" in msg.lower():
        res = b"dkim=fail header.d=" + (d.domain or b"unknown")
    else:
        res = b"dkim=none"
    sys.stdout.buffer.write(b"Authentication-Results: " + AUTHSERV + b"; " + res + b"\r\n" + msg)


main()
