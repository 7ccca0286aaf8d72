set terminal pngcairo size 800,560 noenhanced
set output 'bench/results/rope_window/stories260K-w0/ppl_text.png'
set logscale y
set grid
set key top left
set xlabel 'compression ratio (%)'
set ylabel 'perplexity (text)'
set title 'stories260K'
plot 4.0076044694179735 title 'dense' with lines dashtype 2 lc rgb 'black', '-' using 1:2 with linespoints title 'latentllm'
20 8.975708470338768
40 33.20846091073779
e
