import java.io.*;

public class Main {
    public static void main(String[] args) throws IOException {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        int t = Integer.parseInt(in.readLine().trim());
        StringBuilder out = new StringBuilder();
        for (int i = 0; i < t; i++) {
            String w = in.readLine().trim();
            boolean same = new StringBuilder(w).reverse().toString().equals(w);
            out.append(same ? "Yes" : "No").append('\n');
        }
        System.out.print(out);
    }
}
