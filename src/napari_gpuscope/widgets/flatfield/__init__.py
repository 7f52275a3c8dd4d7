"""The flat-field (BaSiC) dock (:mod:`.dock`) and its Apply panel (:mod:`.apply`)."""
