"""The Kubernetes stand-in of the tests."""
