"""The request-rate controller: AIMD over a token bucket per endpoint,
bucket and kind of request.

- :mod:`.controller`: the steps a request's answer drives (reserve, throttle,
  answered, the node-wide switch), over plain numbers;
- :mod:`.state`: the settings and the state those steps change;
- :mod:`.windows`: the windows of answers, their judgment and calibration;
- :mod:`.shared_table`: the states, in a mapped file every process of a
  machine shares.

:mod:`aioflux._net.throttle` applies them to each request.
"""
