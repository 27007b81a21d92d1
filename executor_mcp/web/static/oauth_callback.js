// The OAuth callback page: hand the sign-in's outcome to the console window that started it, however it can
// reach it (its opener, a broadcast to this origin's windows, and this origin's storage, all named
// "executor:oauth-result", as upstream's popup does), then close this window after a success.
"use strict";

(() => {
  const NAME = "executor:oauth-result";

  document.addEventListener("DOMContentLoaded", () => {
    const data = document.getElementById("oauth-result");
    if (!data) return;
    const result = JSON.parse(data.textContent);
    try {
      if (window.opener) window.opener.postMessage(result, location.origin);
    } catch (error) {
      // The opener is gone or another origin's: the broadcast and the storage still reach the console.
    }
    try {
      const channel = new BroadcastChannel(NAME);
      channel.postMessage(result);
      channel.close();
    } catch (error) {
      // No BroadcastChannel here.
    }
    try {
      localStorage.setItem(NAME, JSON.stringify(result));
    } catch (error) {
      // Storage refused (a private window, say).
    }
    if (result.ok) setTimeout(() => window.close(), 400);
  });
})();
