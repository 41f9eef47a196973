"""What runs inside a container when ``kubectl exec`` starts a process there: the container's view
(its env, files and programs: :mod:`.context`), the programs the twin emulates from the model
(:mod:`.programs`) and the POSIX shell that strings them together (:mod:`.shell`)."""
