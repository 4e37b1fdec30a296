"""``harness campaign migrate FILE URL``: move a campaign file's campaign to PostgreSQL.

Under the file's lock: the state is read; a run still holding custody that may be alive
(its process runs, or it is another host's) refuses the move, since it would go on writing
the file; the state is stored as it is under the URL's campaign name (refused when that name
exists, unless ``replace``); then the file is replaced by a record naming the URL, so a run
given the file is refused instead of spending the same ceiling twice. Dead runs' custody
moves with the campaign (``harness campaign reconcile URL --run ROOT`` settles it there).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from . import custody
from . import errors as E
from .errors import refuse
from .filestore import FileCampaignStore
from .models import CampaignState
from .pgstore import PostgresCampaignStore
from .pgurl import CampaignUrl


@dataclass(frozen=True)
class Moved:
    source: str
    target: str
    state: CampaignState


def migrate(
    file: str | os.PathLike[str], url: str | CampaignUrl, *, replace: bool = False
) -> Moved:
    source = FileCampaignStore(file)
    target = PostgresCampaignStore(url)

    def install(state: CampaignState) -> str:
        for entry in state.active_runs.values():
            if custody.liveness(entry) != "dead":
                raise refuse(
                    E.CAMPAIGN_IN_USE,
                    f"{custody.describe(entry)} still holds custody in {source.path}: migrate "
                    "once it has finished (a run of another host: once it has, or reconcile "
                    "it)",
                )
        target.put(state, replace=replace)
        return target.location

    state = source.move_out(install)
    return Moved(source=str(source.path), target=target.location, state=state)
