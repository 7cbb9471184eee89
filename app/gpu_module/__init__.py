"""llama.cpp GPU backend modules that Ember downloads rather than ships (`ember cuda`):
`manifest` reads what a module is and where its files come from, `install` fetches, verifies
and installs it into the data folder, `installed` says what is there and tells the processes
Ember starts where (backends.llamacpp.added_modules loads it)."""
