"""API Priority and Fairness, as a client sees it: a loaded kube-apiserver
turns requests away with 429 Too Many Requests, a Status of reason
TooManyRequests and a Retry-After header (seconds), before it does any of the
work. Which requests is the server's business; here the test picks them
(/_emulator/settings "throttle"): each request of the throttled user with
probability `fraction`, and the next `burst` of them whatever the fraction.
The test hooks are never throttled.
"""
import random
import threading

from .errors import ApiError


class FlowControl:
    def __init__(self):
        self.lock = threading.Lock()
        self.user = None          # the throttled user name; None: nobody
        self.fraction = 0.0
        self.burst = 0            # the next this many requests are refused
        self.retry_after = 1      # whole seconds, as the server sends them
        self.random = random.Random(0)

    def configure(self, settings):
        """settings: {"user", "fraction", "burst", "retryAfterSeconds"}; {} turns it off."""
        with self.lock:
            self.user = settings.get("user")
            self.fraction = float(settings.get("fraction", 0.0))
            self.burst = int(settings.get("burst", 0))
            self.retry_after = int(settings.get("retryAfterSeconds", 1))
            self.random = random.Random(settings.get("seed", 0))

    def describe(self):
        return {"user": self.user, "fraction": self.fraction, "burst": self.burst,
                "retryAfterSeconds": self.retry_after}

    def admit(self, user_name):
        """Raises the 429 when this request of `user_name` is turned away."""
        with self.lock:
            if self.user is None or user_name != self.user:
                return
            if self.burst > 0:
                self.burst -= 1
            elif self.random.random() >= self.fraction:
                return
            seconds = self.retry_after
        raise ApiError(429, "TooManyRequests", "Too many requests, please try again later.",
                       {"retryAfterSeconds": seconds}, headers={"Retry-After": str(seconds)})
