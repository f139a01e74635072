// Empty: the module exists for its header (a C target needs one source file).
#include "CRPCLinux.h"
