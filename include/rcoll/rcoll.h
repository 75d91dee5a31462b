// Umbrella header: everything a program needs to use rcoll.
#pragma once

#include "rcoll/communicator.h"
#include "rcoll/options.h"
#include "rcoll/status.h"
#include "rcoll/store.h"
#include "rcoll/types.h"
#include "rcoll/version.h"
