"""Apache namespace for protocols reproduced from public interfaces."""
