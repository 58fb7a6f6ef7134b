"""Time as the API server writes and kubectl prints it: RFC 3339 timestamps
(metav1.Time, metav1.MicroTime) and the AGE column's human durations.
"""
import datetime
import time


def now_iso():
    """RFC 3339 UTC timestamp with second precision, like metav1.Time."""
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def now_micro():
    """RFC 3339 timestamp with microseconds, like metav1.MicroTime."""
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(text):
    if not text:
        return None
    text = text.replace("Z", "+00:00")
    try:
        return datetime.datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


def human_duration(seconds):
    """k8s.io/apimachinery/pkg/util/duration.HumanDuration."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return "%ds" % s
    minutes = s // 60
    if minutes < 10:
        sec = s % 60
        return "%dm" % minutes if sec == 0 else "%dm%ds" % (minutes, sec)
    if minutes < 180:
        return "%dm" % minutes
    hours = s // 3600
    if hours < 8:
        m = minutes % 60
        return "%dh" % hours if m == 0 else "%dh%dm" % (hours, m)
    if hours < 48:
        return "%dh" % hours
    if hours < 24 * 8:
        h = hours % 24
        return "%dd" % (hours // 24) if h == 0 else "%dd%dh" % (hours // 24, h)
    if hours < 24 * 365 * 2:
        return "%dd" % (hours // 24)
    if hours < 24 * 365 * 8:
        dy = (hours // 24) % 365
        return "%dy" % (hours // 24 // 365) if dy == 0 else "%dy%dd" % (hours // 24 // 365, dy)
    return "%dy" % (hours // 24 // 365)


def age(timestamp):
    t = parse_time(timestamp)
    if t is None:
        return "<unknown>"
    return human_duration(time.time() - t)
