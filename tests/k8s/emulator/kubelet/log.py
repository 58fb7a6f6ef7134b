"""The kubelet's own messages, on stderr (the cluster launcher keeps them in
kubelet.log).
"""
import sys


def log(msg):
    sys.stderr.write("kubelet: %s\n" % msg)
    sys.stderr.flush()
