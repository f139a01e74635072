// The client arrives with issue 5.
