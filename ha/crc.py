"""CRC-32C (Castagnoli) of replication chunks, computed with crcmod's C extension.

CRC-32C rather than the commitlog's CRC-32: it is the checksum of the transport (gRPC frames
have none of their own), independent of the record CRCs the slave's reput checks later.
"""
from __future__ import annotations

import crcmod.predefined

crc32c = crcmod.predefined.mkPredefinedCrcFun("crc-32c")
