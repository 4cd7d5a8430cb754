"""errortrack: a self-hosted error-tracking and logs backend for unchanged Sentry SDKs."""

import sys

# Integers of at most 640 digits, Python's lowest limit (4,300 by default), in the text
# SDKs send and everywhere else: msgspec reads every integer exactly, and converting
# digits costs time in their square, so 19 MiB of logs holding 4,300-digit numbers took
# 1.8-3.2 s of the event loop where ordinary logs take 0.14 s (DoS review, twenty-ninth
# session). A longer integer is a 400, as one past 4,300 digits was; 10**400 still reads.
sys.set_int_max_str_digits(640)
