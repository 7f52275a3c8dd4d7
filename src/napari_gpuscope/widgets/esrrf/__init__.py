"""The eSRRF dock and its sections: the dock (:mod:`.dock`), the drift section (:mod:`.drift`,
its plot in :mod:`.drift_plot`), the parameter sweep panel (:mod:`.sweep`) and the extra
channel layers (:mod:`.channels`)."""
