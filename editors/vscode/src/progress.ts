/**
 * Work-done progress the server reports with `$/progress` while it builds: begin, report, end
 * per token. The tracker only keeps state; the status bar asks it whether anything is building.
 */

export interface ProgressBegin {
  kind: "begin";
  title: string;
  message?: string;
  percentage?: number;
}

export interface ProgressReport {
  kind: "report";
  message?: string;
  percentage?: number;
}

export interface ProgressEnd {
  kind: "end";
  message?: string;
}

export type ProgressValue = ProgressBegin | ProgressReport | ProgressEnd;
export type ProgressToken = string | number;

export interface Activity {
  title: string;
  message: string | undefined;
  percentage: number | undefined;
}

export class ProgressTracker {
  private readonly active = new Map<ProgressToken, Activity>();

  /** Applies one `$/progress` value; true when a build ended with it. */
  update(token: ProgressToken, value: ProgressValue): boolean {
    switch (value.kind) {
      case "begin":
        this.active.set(token, {
          title: value.title,
          message: value.message,
          percentage: value.percentage,
        });
        return false;
      case "report": {
        const activity = this.active.get(token);
        if (activity) {
          activity.message = value.message ?? activity.message;
          activity.percentage = value.percentage ?? activity.percentage;
        }
        return false;
      }
      case "end":
        return this.active.delete(token);
    }
  }

  /** Forget everything, e.g. when the server stops mid-build. */
  clear(): void {
    this.active.clear();
  }

  get building(): boolean {
    return this.active.size > 0;
  }

  /** The most recently begun activity, which is what a one-line status can show. */
  get current(): Activity | undefined {
    let last: Activity | undefined;
    for (const activity of this.active.values()) {
      last = activity;
    }
    return last;
  }

  /** "building refused: lowering 2/3 (60 %)". */
  describe(): string | undefined {
    const activity = this.current;
    if (!activity) {
      return undefined;
    }
    const parts = [activity.title];
    if (activity.message) {
      parts.push(activity.message);
    }
    const text = parts.join(": ");
    return activity.percentage === undefined ? text : `${text} (${activity.percentage} %)`;
  }
}
