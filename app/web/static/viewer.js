// The log viewer's enhancements (see viewer.html); the page works without them.
"use strict";
