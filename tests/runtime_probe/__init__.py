"""Runtime harness: run scripts under torchrun with an out-of-process probe (see harness.py).

The probe itself is migrator/verify/probe/sitecustomize.py, ddp-migrate verify's, shipped in the
package; the harness puts its folder on the PYTHONPATH of the interpreters it starts. The tests
never import it.
"""
