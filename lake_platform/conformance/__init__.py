"""The conformance kit: spec-level checks of any Lance Namespace REST server (``lake conformance``).

``spec`` reads what each operation answers from the pinned generated client, ``client`` sends
operations, ``verdicts`` judges answers, ``registry`` holds the checks that ``checks_*`` register
in the scenario's order, ``run`` runs them in a throwaway namespace and cleans up, ``report`` is
the pass table."""
