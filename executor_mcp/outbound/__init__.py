"""Outbound HTTP for integrations, behind the SSRF guard.

guard.py       which schemes, hosts and addresses may be reached (sans-I/O)
model.py       the request, answer and typed failure values (sans-I/O)
client.py      `Outbound`: httpx over a guarded network backend, redirects, deadlines, size caps
useragent.py   the default User-Agent
"""
